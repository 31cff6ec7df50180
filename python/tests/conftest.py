import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo():
    return REPO


@pytest.fixture(scope="session")
def ref():
    import hefprobe

    return hefprobe.reference(synth="tinystories", tokens=[5, 17, 301, 4, 99, 23], decode=2)
