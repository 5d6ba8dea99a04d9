"""Packaging: the repository's top-level folders install under one namespace, `zoo`, so no
generic top-level name (core, eval, tools, benchmarks) lands in site-packages:

    zoo/ -> zoo (the model families)    core/ -> zoo.core    eval/ -> zoo.eval
    benchmarks/ -> zoo.benchmarks       tools/ -> zoo.tools

Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

FOLDERS = ("core", "eval", "benchmarks", "tools")


def packages_and_dirs() -> tuple[list[str], dict[str, str]]:
    """Every folder counts as a package (namespace discovery), so data folders such as
    presets and the tokenizer ship with their package data."""
    skip = ["*__pycache__*"]
    packages = find_namespace_packages(include=["zoo", "zoo.*"], exclude=skip)
    package_dir = {"zoo": "zoo"}
    for folder in FOLDERS:
        package_dir[f"zoo.{folder}"] = folder
        inner = find_namespace_packages(folder, exclude=skip)
        packages += [f"zoo.{folder}"] + [f"zoo.{folder}.{sub}" for sub in inner]
    return packages, package_dir


PACKAGES, PACKAGE_DIR = packages_and_dirs()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
