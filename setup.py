"""Packaging: the repository's top-level folders install under one namespace, `zoo`, so no
generic top-level name (core, eval, tools, benchmarks) lands in site-packages:

    zoo/ -> zoo (the model families)    core/ -> zoo.core    eval/ -> zoo.eval
    benchmarks/ -> zoo.benchmarks       tools/ -> zoo.tools

Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

FOLDERS = ("core", "eval", "benchmarks", "tools")


def packages_and_dirs() -> tuple[list[str], dict[str, str]]:
    packages = find_packages(include=["zoo", "zoo.*"])
    package_dir = {"zoo": "zoo"}
    for folder in FOLDERS:
        package_dir[f"zoo.{folder}"] = folder
        packages += [f"zoo.{folder}"] + [f"zoo.{folder}.{sub}" for sub in find_packages(folder)]
    return packages, package_dir


PACKAGES, PACKAGE_DIR = packages_and_dirs()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
