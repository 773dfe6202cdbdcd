import pytest

from newsmotion_engine.errors import InvalidIdError
from newsmotion_engine.ids import slugify, validate_id


@pytest.mark.parametrize("good", ["welcome", "a", "nod_2", "jane-doe", "x" * 64])
def test_valid_ids(good):
    assert validate_id(good) == good


@pytest.mark.parametrize("bad", ["../x", "A B", "", "x" * 65, "con", "CON", "-lead", "naïve", "a/b", ".hidden", None])
def test_invalid_ids(bad):
    with pytest.raises(InvalidIdError, match="invalid"):
        validate_id(bad)


@pytest.mark.parametrize(
    "name, slug",
    [("Jane Doe (2)", "jane-doe-2"), ("Zoë_Smith", "zoe_smith"), ("CON", "con-1"), ("---", None), ("日本", None)],
)
def test_slugify(name, slug):
    assert slugify(name) == slug
