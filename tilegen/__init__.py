"""tilegen: compile declarative ``.tile`` kernel specs to readable Triton.

Pipeline (one module per stage, plain data between them)::

    parser (Lark -> model) -> check (semantic rules) -> lower (plan) -> render (Jinja) -> build
"""

__version__ = "0.1.0"
