import pytest


@pytest.fixture(params=["cross_entropy"])
def loss_mode(request):
    """The loss patch puts in (the fused linear form is added once it is in the package)."""
    return request.param
