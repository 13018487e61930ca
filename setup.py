"""Map the project's component folders onto the ``stackbench.<component>`` packages.

The folders users expect (``results-db/``, ``web/``...) are not valid import names, so the
package list and data files are computed here; a wheel then carries exactly what an editable
install sees.
"""

import os

from setuptools import setup

COMPONENTS = {
    "stackbench": "stackbench",
    "stackbench.resultsdb": "results-db",
    "stackbench.web": "web",
    "stackbench.jobs": "jobs",
    "stackbench.patches": "patches",
    "stackbench.kernels": "kernels",
    "stackbench.mail": "mail",
}
DATA_SUFFIXES = (
    ".sql",
    ".yaml",
    ".yml",
    ".html",
    ".txt",
    ".css",
    ".js",
    ".c",
    ".h",
    ".sh",
    ".config",
    ".ini",
    ".mako",
    ".patch",
    ".json",
    "Makefile",
    "Kbuild",
    ".cfg",
    ".mbox",
)


def discover() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    package_data: dict[str, list[str]] = {}
    for root_pkg, folder in COMPONENTS.items():
        package_dir[root_pkg] = folder
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
            if "__init__.py" not in filenames:
                continue
            rel = os.path.relpath(dirpath, folder)
            pkg = root_pkg if rel == "." else root_pkg + "." + rel.replace(os.sep, ".")
            packages.append(pkg)
            data = []
            # data files live in the package folder or in plain (non-package) subfolders
            for sub, subdirs, files in os.walk(dirpath):
                if sub != dirpath and "__init__.py" in files:
                    subdirs[:] = []
                    continue
                subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
                for f in files:
                    if f.endswith(DATA_SUFFIXES):
                        data.append(os.path.relpath(os.path.join(sub, f), dirpath))
            if data:
                package_data[pkg] = data
    return packages, package_dir, package_data


packages, package_dir, package_data = discover()
setup(packages=packages, package_dir=package_dir, package_data=package_data)
