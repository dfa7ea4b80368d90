"""megatron-overlay: megatron-core 0.18's output_processor hook on cores 0.12-0.17, by
install-time patches, and fused output processors (log-probs + entropy)."""

from setuptools import find_packages, setup

setup(
    name="megatron-overlay",
    version="0.1.0",
    description="output_processor hook for every megatron-core 0.12-0.19, and fused "
                "log-prob/entropy output processors that never materialize the logits",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["megatron_overlay", "megatron_overlay.*"])
    + ["megatron_overlay._patches"],
    # patches/ is shipped inside the package so `megatron-overlay patch` finds it anywhere
    package_dir={"megatron_overlay._patches": "patches"},
    package_data={"megatron_overlay._patches": ["*/manifest.json", "*/*.patch"]},
    install_requires=[
        "torch>=2.1",
        "megatron-core>=0.12.0,<0.20",
        "packaging",
        "tqdm",  # the demo's progress bar
    ],
    extras_require={
        # never required: megatron-core runs its local spec without them
        "te": ["transformer-engine"],
        "flash-attn": ["flash-attn"],
        "gpu": ["triton>=3.0"],
        # uv: the tests install the overlay's wheels with it too
        "test": ["pytest>=7", "hypothesis>=6", "uv"],
    },
    entry_points={"console_scripts": ["megatron-overlay=megatron_overlay.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
    ],
)
