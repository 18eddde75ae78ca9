#!/usr/bin/env python3
"""iree 3.13.0: RESIZE_BILINEAR on TENSOR_FLOAT32 inputs

Runs model.mlir and model.onnx on iree 3.13.0 with the inputs in inputs.npz and compares every output
with expected.npz (the reference results) within the tolerance case.json gives for it.

    pip install iree-base-compiler==3.13.0 iree-base-runtime==3.13.0 numpy
    python run.py

Exit status 0: every output within its tolerance (not reproduced); 1: an output outside it
(REPRODUCED); 2: the runtime is not installed; 3: the runtime raised an error. A process
killed by a signal reproduces a crash; one that does not end reproduces a hang.
"""

import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASE = json.loads((HERE / "case.json").read_text())
WORST = 5  # elements shown per output


def run(inputs):
    import iree.compiler
    import iree.runtime

    vmfb = iree.compiler.compile_file(str(HERE / "model.mlir"), input_type="onnx",
                                      target_backends=['vmvx'], extra_args=[])
    config = iree.runtime.Config('local-sync')
    context = iree.runtime.SystemContext(config=config)
    context.add_vm_module(iree.runtime.VmModule.copy_buffer(config.vm_instance, vmfb))
    results = context.modules.module['nncert'](*inputs)
    results = results if isinstance(results, (tuple, list)) else [results]
    outputs = []
    for result, output in zip(results, CASE["outputs"]):
        a, wanted = result.to_host(), np.dtype(output["dtype"])
        # IREE's integers are signless: a uint8 result comes back as int8 of the same bits
        if a.dtype != wanted and a.dtype.kind in "iu" and wanted.kind in "iu":
            a = a.view(wanted)
        outputs.append(a)
    return outputs


def judge(actual, expected, tolerance):
    """|actual - expected| per element, the elements outside the tolerance, and why the
    output fails ("" when it does not)."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        diff = np.where(same, 0.0, np.nan_to_num(np.abs(a - e), nan=np.inf))
        outside = ~same & ~(diff <= tolerance["atol"] + tolerance["rtol"] * np.abs(e))
    judged = np.ones(e.shape, bool)
    if "ignore_above" in tolerance:  # huge or non-finite expected values are not judged
        judged = np.isfinite(e) & (np.abs(e) <= tolerance["ignore_above"])
        outside &= judged
    if outside.sum() > tolerance.get("allowed_wrong", 0):
        return diff, outside, f"{outside.sum()} of {outside.size} elements outside the tolerance"
    if "max_bias" in tolerance and judged.sum() >= 10:
        error = (a - e)[judged]
        if tolerance["relative_error"]:
            error = error / np.maximum(1.0, np.abs(e[judged]))
        if abs(error.mean()) > tolerance["max_bias"]:
            return diff, outside, f"mean error {error.mean():.3g} beyond {tolerance['max_bias']:g}"
        if (error ** 2).mean() > tolerance["max_mse"]:
            return diff, outside, f"mse {(error ** 2).mean():.3g} beyond {tolerance['max_mse']:g}"
    return diff, outside, ""


def show(value, output):
    """An element, with its real value when the output is quantised."""
    if "scale" not in output:
        return repr(value.item())
    return f"{value.item()} (real {(float(value) - output['zero_point']) * output['scale']:g})"


def main():
    with np.load(HERE / "inputs.npz", allow_pickle=False) as f:
        inputs = [f[i["name"]] for i in CASE["inputs"]]
    with np.load(HERE / "expected.npz", allow_pickle=False) as f:
        expected = [f[o["name"]] for o in CASE["outputs"]]
    package = CASE["packages"][0].split("==")[0]
    try:
        installed = metadata.version(package)
    except metadata.PackageNotFoundError:
        installed = "not installed"
    print(f"{package} {installed} (the reproducer was written with {CASE['runtime_version']})")
    try:
        actual = run(inputs)
    except ImportError as e:
        print(f"cannot run: {e}; pip install {' '.join(CASE['packages'])} numpy")
        return 2
    except Exception as e:
        print(f"ERROR: {CASE['runtime']} raised {type(e).__name__}: {e}")
        return 3
    failed = [] if len(actual) == len(expected) else [f"{len(actual)} outputs, expected {len(expected)}"]
    for output, a, e in zip(CASE["outputs"], actual, expected):
        a = np.asarray(a)
        if a.dtype != e.dtype:  # float16 is computed in float32: rounded to the output's type
            a = a.astype(e.dtype)
        tolerance = output["tolerance"]
        print(f"{output['name']} ({output['type']}): shape {list(a.shape)} {a.dtype}")
        if a.shape != e.shape:
            failed.append(f"{output['name']}: shape {list(a.shape)}, expected {list(e.shape)}")
            continue
        diff, outside, why = judge(a, e, tolerance)
        print(f"  max abs difference {diff.max() if diff.size else 0:g}; tolerance: {tolerance['text']}")
        for flat in np.argsort(-diff, axis=None, kind="stable")[:WORST]:
            index = np.unravel_index(flat, diff.shape)
            if diff[index] > 0:
                mark = "outside" if outside[index] else "within"
                print(f"  {[int(i) for i in index]}: actual {show(a[index], output)}, "
                      f"expected {show(e[index], output)} ({mark})")
        if why:
            failed.append(f"{output['name']}: {why}")
    if failed:
        print("REPRODUCED: " + "; ".join(failed))
        return 1
    print("not reproduced: every output is within its tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
