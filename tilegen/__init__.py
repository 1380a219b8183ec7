"""tilegen: compile declarative ``.tile`` kernel specs to readable Triton.

Pipeline (one module per stage, plain data between them)::

    parser (Lark -> model) -> check (semantic rules) -> lower (plan) -> render (Jinja) -> build
"""

__version__ = "0.1.0"

__all__ = ["__version__", "patch"]


def __getattr__(name: str) -> object:
    """``tilegen.patch`` (:func:`tilegen.nn.patch.patch`), imported on first use: ``import tilegen``
    itself imports neither torch nor transformers."""
    if name == "patch":
        from tilegen.nn.patch import patch

        return patch
    raise AttributeError(f"module 'tilegen' has no attribute {name!r}")
