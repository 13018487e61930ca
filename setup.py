"""Map the project's component folders onto the ``stackbench.<component>`` packages.

The folders users expect (``results-db/``, ``web/``...) are not valid import names, so the
package list and data files are computed here; a wheel then carries exactly what an editable
install sees.

Every folder with an importable name is declared a package, data-only ones too (``templates``,
``defs``...: namespace packages): setuptools warns about, and will one day drop, data in an
importable folder that ``packages`` does not name. Folders whose names cannot be imported
(``upstream-bin``, ``compaction-demo``) are data of the package above them.
"""

import os
import warnings

from setuptools import setup
from setuptools.warnings import InformationOnly

# The editable install's meta path finder is what maps results-db/ to stackbench.resultsdb; the
# notice setuptools prints about it on every `pip install -e .` asks nothing of anyone.
warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

COMPONENTS = {
    "stackbench": "stackbench",
    "stackbench.resultsdb": "results-db",
    "stackbench.web": "web",
    "stackbench.jobs": "jobs",
    "stackbench.patches": "patches",
    "stackbench.kernels": "kernels",
    "stackbench.mail": "mail",
}
# Everything else in a package folder is data: a suffix list once left extension-less guest
# scripts out of the wheel.
NOT_DATA_SUFFIXES = (".py", ".pyc", ".pyo")


def _skipped(name: str) -> bool:
    return name.startswith((".", "__"))


def discover() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    package_data: dict[str, list[str]] = {}
    for root_pkg, folder in COMPONENTS.items():
        package_dir[root_pkg] = folder
        for dirpath, dirnames, _ in os.walk(folder):
            # an unimportable folder is data of its parent, and so is everything below it
            dirnames[:] = [d for d in dirnames if not _skipped(d) and d.isidentifier()]
            rel = os.path.relpath(dirpath, folder)
            pkg = root_pkg if rel == "." else root_pkg + "." + rel.replace(os.sep, ".")
            packages.append(pkg)
            data = []
            for sub, subdirs, files in os.walk(dirpath):
                if sub != dirpath and os.path.basename(sub).isidentifier():
                    subdirs[:] = []  # a package of its own
                    continue
                subdirs[:] = [d for d in subdirs if not _skipped(d)]
                data += [
                    os.path.relpath(os.path.join(sub, f), dirpath)
                    for f in files
                    if not f.endswith(NOT_DATA_SUFFIXES) and not f.startswith(".")
                ]
            if data:
                package_data[pkg] = sorted(data)
    return packages, package_dir, package_data


packages, package_dir, package_data = discover()
setup(packages=packages, package_dir=package_dir, package_data=package_data)
