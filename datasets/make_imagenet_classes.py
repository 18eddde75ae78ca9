"""Regenerate imagenet_classes.txt: the 1000 ImageNet-1k class names, one per line, in the
standard class-index order (line i is class i, 0-based).

The names are the WordNet lemmas of the ILSVRC-2012 synsets as timm ships them
(``timm/data/_info/imagenet_synsets.txt`` for the order, ``imagenet_synset_to_lemma.txt`` for
the names). timm is read from its wheel once, here; it is not a dependency of nncert.

    python datasets/make_imagenet_classes.py                  # pip-downloads timm==TIMM_VERSION
    python datasets/make_imagenet_classes.py timm-1.0.31-py3-none-any.whl

Models whose label files have 1001 entries ("background" first, as the TFLite ImageNet
classifiers) use index + 1.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TIMM_VERSION = "1.0.31"
OUT = Path(__file__).resolve().parent / "imagenet_classes.txt"
_INFO = "timm/data/_info/"


def class_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        synsets = z.read(_INFO + "imagenet_synsets.txt").decode().split()
        lemmas = dict(line.split("\t", 1) for line in
                      z.read(_INFO + "imagenet_synset_to_lemma.txt").decode().splitlines() if line)
    if len(synsets) != 1000 or len(set(synsets)) != 1000:
        raise SystemExit(f"{wheel}: expected 1000 distinct ImageNet-1k synsets, found {len(synsets)}")
    return [lemmas[s].strip() for s in synsets]


def main(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if argv:
            wheel = Path(argv[0])
        else:
            subprocess.run([sys.executable, "-m", "pip", "download", f"timm=={TIMM_VERSION}", "--no-deps",
                            "--only-binary", ":all:", "-d", tmp], check=True)
            wheel = next(Path(tmp).glob("timm-*.whl"))
        names = class_names(wheel)
    OUT.write_text("".join(name + "\n" for name in names))
    print(f"wrote {OUT} ({len(names)} classes)")


if __name__ == "__main__":
    main(sys.argv[1:])
