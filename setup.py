"""Packaging of tvm_icca: the ICCA backend for TVM, its op templates and simulated device."""

from setuptools import find_packages, setup

setup(
    name="tvm-icca",
    version="0.1.0",
    description="TVM backend for inter-core connected AI chips (T10 compute-shift plans) "
    "with a simulated ICCA device",
    python_requires=">=3.10",
    # every subpackage (tvm_icca.plan_search, .cli, .workloads, .testing, runtime_sim.timing, ...)
    packages=find_packages(include=["tvm_icca", "tvm_icca.*", "schedules", "schedules.*",
                                    "runtime_sim", "runtime_sim.*"]),
    # every data file the code loads at run time (tests/test_packaging.py checks the wheel)
    package_data={"tvm_icca": ["data/*.onnx"]},
    install_requires=[
        "apache-tvm>=0.27,<0.28",
        # 0.1.15.* segfaults in tvm.ir.save_json, which meta_schedule needs.
        "apache-tvm-ffi<0.1.15",
        "onnx>=1.15",
        # bfloat16 arrays for numpy; TVM and onnx already depend on it
        "ml_dtypes>=0.2",
        "numpy>=1.24",
        "tqdm>=4.62",  # the delay= of tvm_icca.progress
        # tvm_icca.load_hardware reads .toml chip files; tomllib is stdlib from 3.11
        'tomli>=1.1; python_version < "3.11"',
        # tvm_icca.tune: the learned cost model and meta_schedule's runtime needs
        "xgboost-cpu>=2.0",
        "psutil>=5.9",
        "cloudpickle>=2.0",
    ],
    extras_require={
        # wheel: tests/test_packaging.py builds the wheel without build isolation
        # import-linter: `lint-imports` checks the layer rules of .importlinter (make test)
        # matplotlib: the tutorials plot, and tests/test_tutorials.py runs them
        # pytest-xdist: `make test` runs the suite on every core (-n auto, --dist loadgroup)
        "test": ["pytest>=7", "pytest-xdist>=3.5", "hypothesis>=6", "wheel>=0.38",
                 "import-linter>=2.17", "matplotlib>=3.7"],
        # bench: the figures plot; benchmarks/real_exports.py exports PyTorch models with both
        # of torch's ONNX exporters (the dynamo one needs onnxscript) and checks the chip's
        # results against onnxruntime (torchvision's build must match torch's)
        "bench": ["matplotlib>=3.7", "torch>=2.5", "torchvision>=0.20", "onnxruntime>=1.17",
                  "onnxscript>=0.2"],
        # dse: `tvm-icca dse --ray` (Ray tasks on a cluster), YAML specs, the report's plots;
        # its tables: pandas (to_csv), pyarrow (to_parquet), tabulate (to_markdown)
        "dse": ["ray>=2.9", "pyyaml>=6", "matplotlib>=3.7", "pandas>=2", "pyarrow>=14",
                "tabulate>=0.9"],
        # docs: `make docs` (docs/conf.py); tutorials plot, so the gallery needs matplotlib;
        # numpydoc-style docstrings are read by Sphinx's own napoleon extension; myst-parser
        # includes the markdown tables of benchmarks/results/ in the Results page; joblib runs
        # the tutorials in parallel (sphinx-gallery's "parallel", 0.17 and later)
        "docs": ["sphinx>=7.2", "sphinx-gallery>=0.17", "furo>=2024.1", "myst-parser>=3.0",
                 "sphinx-argparse>=0.5", "matplotlib>=3.7", "joblib>=1.3"],
    },
    entry_points={
        # TVM imports every entry point of this group at `import tvm` (tvm/__init__.py).
        "tvm.backends": ["icca = tvm_icca._autoload:autoload"],
        "console_scripts": ["tvm-icca = tvm_icca.cli.main:main"],
    },
)
