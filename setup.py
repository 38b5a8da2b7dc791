"""Build script for the optional C kernels; all other metadata lives in setup.cfg / pyproject.toml.

``pipeline/data/_per_kernels.c`` (prioritized replay's hot loops) needs only a C compiler and the
Python headers, no numpy headers. It is ``optional``: without a compiler the install still
succeeds and the replay buffer uses its numpy code instead (as it does with ``RLPIPE_NO_EXT=1``).
Rebuild in place after editing the C file: ``python setup.py build_ext --inplace``.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pipeline.data._per_kernels",
            sources=["pipeline/data/_per_kernels.c"],
            optional=True,
        )
    ]
)
