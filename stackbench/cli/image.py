"""stackbench image: build (or find) the Debian guest image jobs with ``image=debian`` and the
bare-metal box VM boot."""

from __future__ import annotations

import argparse
import json

NAME = "image"
HELP = "build or show the Debian guest image (mmdebstrap, cached by content)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="build the image unless the cache has it; print its path")
    b.add_argument("name", nargs="?", default="debian", help="image name (default debian)")
    b.add_argument("--json", action="store_true", help="print what was built as JSON")
    s = sub.add_parser("path", help="print the cached image's path (exit 1 when not built)")
    s.add_argument("name", nargs="?", default="debian")
    sub.add_parser("packages", help="list the image's Debian packages and why each is there")


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.benchmarks.guest import image

    if args.action == "packages":
        for name in image.packages():
            print(f"{name:22} {image.PACKAGES[name]}")
        return 0
    if args.action == "path":
        found = image.find(args.name)
        if found is None:
            print(f"image {args.name} is not built yet (stackbench image build {args.name})")
            return 1
        print(found.path)
        return 0
    img = image.ensure(args.name)
    if args.json:
        print(json.dumps({
            "path": str(img.path), "key": img.key, "reused": img.reused,
            "build_s": img.build_s, "size_bytes": img.size_bytes, "used_bytes": img.used_bytes,
            "packages": len(img.packages),
        }))  # fmt: skip
        return 0
    how = "cached" if img.reused else "built"
    print(
        f"image {img.name} ({how}): {img.path}\n"
        f"  {len(img.packages)} packages, built in {img.build_s:.0f} s, "
        f"{img.size_bytes / 2**20:.0f} MiB ext4 ({img.used_bytes / 2**20:.0f} MiB on disk)"
    )
    return 0
