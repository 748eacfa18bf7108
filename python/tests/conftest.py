# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the flashcl context (FLASHCL_DEVICE, PoCL in the test command) and seeded
random inputs."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import flashcl  # noqa: E402


@pytest.fixture(scope="session")
def ctx() -> flashcl.Context:
    return flashcl.default_context()


@pytest.fixture(scope="session", params=["in-place", "copied"])
def any_ctx(request) -> flashcl.Context:
    """The device twice: numpy arrays used in place where it allows, and copied to device
    buffers (the path of GPUs)."""
    return flashcl.default_context() if request.param == "in-place" else flashcl.Context(use_host_memory=False)


def rand(shape, seed, dtype=np.float32):
    """Uniform values in [-1, 1) from a fixed seed, as `dtype` (float16 values are exact)."""
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)
