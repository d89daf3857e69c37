"""Serve the book's browser libraries from its own ``_static`` folder, never from a CDN.

MathJax 3, require.js and the ipywidgets HTML manager are npm packages pinned in
``book/_vendor/package.json`` / ``package-lock.json`` and installed with ``npm ci``
(``make book`` does it) into ``book/_vendor/node_modules`` (git-ignored). When the
HTML build finishes, this extension copies the files the pages load into
``_build/html/_static/vendor/``; ``_config.yml`` points ``mathjax_path`` and
myst-nb's ``nb_ipywidgets_js`` at them.

A build without the npm packages fails at its start with a message saying what to
run, instead of producing pages that would reach for the network.
"""
from __future__ import annotations

import shutil
from pathlib import Path

VENDOR_DIR = Path(__file__).resolve().parent.parent / "_vendor"
NODE_MODULES = VENDOR_DIR / "node_modules"

# (source under node_modules, destination under _static/vendor, files to leave out)
ASSETS = (
    ("mathjax/es5", "mathjax", ("*.map",)),
    ("requirejs/require.js", "require.js", ()),
    ("@jupyter-widgets/html-manager/dist", "html-manager",
     ("*.map", "embed.js", "embed.js.LICENSE.txt", "libembed-amd.js")),
)


def missing_assets(node_modules=NODE_MODULES):
    """Return the asset sources missing under ``node_modules`` (empty when all are there)."""
    return [src for src, _, _ in ASSETS if not (Path(node_modules) / src).exists()]


def copy_assets(static_dir, node_modules=NODE_MODULES):
    """Copy the vendored files into ``static_dir / "vendor"``.

    Args:
        static_dir: the built book's ``_static`` folder.
        node_modules: where ``npm ci`` installed the packages.

    Returns:
        list[Path]: the copied destinations.
    """
    vendor = Path(static_dir) / "vendor"
    vendor.mkdir(parents=True, exist_ok=True)
    copied = []
    for src, dst, ignore in ASSETS:
        source, target = Path(node_modules) / src, vendor / dst
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(*ignore) if ignore else None)
        else:
            shutil.copy2(source, target)
        copied.append(target)
    return copied


def _check_installed(app):
    if app.builder.format != "html":
        return
    missing = missing_assets()
    if missing:
        from sphinx.errors import ExtensionError

        raise ExtensionError(
            "the book's offline browser libraries are not installed ("
            + ", ".join(missing)
            + f" missing under {NODE_MODULES}); run `make book`, or "
            f"`npm ci --prefix {VENDOR_DIR}` once"
        )


def _copy_after_build(app, exception):
    if exception is None and app.builder.format == "html":
        copy_assets(Path(app.outdir) / "_static")


def setup(app):
    """Sphinx entry point."""
    app.connect("builder-inited", _check_installed)
    app.connect("build-finished", _copy_after_build)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
