"""DotTree semantics (popxl_addons.dot_tree), after ADDONS tests/unit/test_dot_tree.py."""

import numpy as np
import pytest

from popxl_addons import DotTree, NamedTensorData, NamedTensors, to_mapping
from popxl_addons.variable_factory import NamedVariableFactories, VariableFactory


def make():
    t = DotTree()
    t.insert("a", 0)
    t.insert("b.a", 1)
    t.insert("b.b", 2, overwrite=True)  # b exists: extending it needs overwrite, as upstream
    t.insert("c.b.a", 3)
    return t


def test_kwargs_constructor_and_attribute_access():
    t = DotTree(x=1, y=DotTree(z=2))
    assert t.x == 1
    assert t.y.z == 2
    assert t["y.z"] == 2
    assert t.to_dict() == {"x": 1, "y.z": 2}


def test_nested_access():
    t = make()
    assert t.a == 0
    assert t.b.a == 1
    assert t["b.b"] == 2
    assert t.c.b.a == 3
    assert t.get("c.b.a") == 3
    assert isinstance(t.c, DotTree)
    assert isinstance(t.c.b, DotTree)


def test_missing_keys():
    t = make()
    with pytest.raises(KeyError):
        t.get("zz")
    with pytest.raises(KeyError):
        t["b.zz"]
    with pytest.raises(KeyError):
        t["a.b"]  # a is a leaf
    with pytest.raises(AttributeError):
        _ = t.zz
    assert not hasattr(t, "zz")
    assert "b.a" in t and "a" in t and "c.b" in t
    assert "b.c" not in t and "zz" not in t and 3.5 not in t


def test_to_dict_flat_insertion_order():
    t = make()
    d = t.to_dict()
    assert type(d) is dict
    assert list(d.items()) == [("a", 0), ("b.a", 1), ("b.b", 2), ("c.b.a", 3)]
    t2 = DotTree()
    t2.insert("z", 1)
    t2.insert("a", 2)
    assert list(t2.to_dict()) == ["z", "a"]
    assert str(t2.to_dict().keys()) == "dict_keys(['z', 'a'])"


def test_repr_is_flat_dict():
    # The seeds (shared/seeds/001, 002) print NamedTensors / NamedVariableFactories as this dict.
    t = make()
    assert repr(t) == "{'a': 0, 'b.a': 1, 'b.b': 2, 'c.b.a': 3}"
    assert str(t.b) == "{'a': 1, 'b': 2}"
    assert repr(DotTree()) == "{}"


def test_numeric_keys():
    t = DotTree()
    t.insert(0, "zero")
    t.insert("1", "one")
    t.insert(2, "two")
    assert t[0] == "zero" and t["0"] == "zero"
    assert t[1] == "one"
    assert t.get(2) == "two"
    assert t[-1] == "two"
    assert t[-3] == "zero"
    with pytest.raises(KeyError):
        t[-4]
    assert list(t.keys()) == ["0", "1", "2"]
    nested = DotTree()
    nested.insert("layers.0.w", 1)
    nested.insert("layers.1.w", 2, overwrite=True)
    assert nested.layers[1].w == 2
    assert nested["layers.1.w"] == 2
    assert nested.layers[-1].w == 2


def test_negative_int_with_no_numeric_keys():
    with pytest.raises(KeyError):
        DotTree(a=1)[-1]


def test_insert_validation():
    t = DotTree()
    with pytest.raises(ValueError):
        t.insert(-1, 0)
    with pytest.raises(ValueError):
        t.insert("not valid", 0)
    with pytest.raises(ValueError):
        t.insert("a..b", 0)
    with pytest.raises(ValueError):
        t.insert("a.-1", 0)
    with pytest.raises(TypeError):
        t.insert(1.5, 0)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_insert_existing_and_overwrite():
    t = make()
    with pytest.raises(ValueError):
        t.insert("a", 10)
    with pytest.raises(ValueError):
        t.insert("b.a", 10)
    t.insert("a", 10, overwrite=True)
    t.insert("b.a", 11, overwrite=True)
    assert (t.a, t.b.a) == (10, 11)  # (a tuple: `t.a == 10` would narrow t.a to the literal 10 below)
    # leaf under an existing leaf
    with pytest.raises(ValueError):
        t.insert("a.x", 5)
    t.insert("a.x", 5, overwrite=True)
    assert t.a.x == 5


def test_insert_existing_levels_need_overwrite():
    """As upstream: a key existing at any level of the inserted key raises unless
    `overwrite`, which extends the subtrees along the key and replaces its entry."""
    t = make()
    with pytest.raises(ValueError, match="'b' already exists"):
        t.insert("b", DotTree(c=7))
    with pytest.raises(ValueError, match="'b' already exists"):
        t.insert("b.c", 7)  # c is new, but b exists
    assert t.to_dict() == {"a": 0, "b.a": 1, "b.b": 2, "c.b.a": 3}
    b = t.b
    t.insert("b.c", 7, overwrite=True)
    assert t.to_dict() == {"a": 0, "b.a": 1, "b.b": 2, "b.c": 7, "c.b.a": 3} and t.b is b
    t.insert("b", DotTree(a=9), overwrite=True)  # the entry itself is replaced
    assert t.b.to_dict() == {"a": 9}
    # building from flat dotted keys shares the subtrees along the keys
    assert DotTree.from_dict({"x.a": 1, "x.b": 2}).to_dict() == {"x.a": 1, "x.b": 2}
    assert DotTree.pack(["x.a", "x.b"], [1, 2]).x.b == 2
    with pytest.raises(ValueError):
        DotTree.pack(["x", "x.a"], [1, 2])


def test_clear_keeps_nested_trees_and_a_tree_is_always_true():
    inner = DotTree(bar="baz")
    t: DotTree[object] = DotTree(foo=inner, n=1)
    t._clear()
    assert t.foo is inner and not hasattr(t.foo, "bar") and "n" not in t
    assert t and DotTree() and len(DotTree()) == 0  # true when empty, as upstream


def test_insert_tree_keeps_reference():
    t = DotTree()
    sub = DotTree(x=1)
    t.insert("sub", sub)
    assert t.sub is sub
    sub.insert("y", 2)
    assert t.to_dict() == {"sub.x": 1, "sub.y": 2}


def test_setattr_is_rejected():
    t = DotTree()
    with pytest.raises(AttributeError):
        t.a = 1


def test_update():
    t = DotTree(a=1)
    t.update(DotTree(b=2, c=DotTree(d=3)))
    assert t.to_dict() == {"a": 1, "b": 2, "c.d": 3}
    with pytest.raises(ValueError):
        t.update(DotTree(a=5))
    t.update(DotTree(a=5), overwrite=True)
    assert t.a == 5
    t.update({"e.f": 6})
    assert t.e.f == 6


def test_pop():
    t = make()
    assert t.pop("b.a") == 1
    assert t.to_dict() == {"a": 0, "b.b": 2, "c.b.a": 3}
    sub = t.pop("c")
    assert isinstance(sub, DotTree) and sub.to_dict() == {"b.a": 3}
    assert t.to_dict() == {"a": 0, "b.b": 2}
    with pytest.raises(KeyError):
        t.pop("zz")


def test_copy_is_shallow_with_copied_subtrees():
    leaf = object()
    t = DotTree()
    t.insert("a.b", leaf)
    c = t.copy()
    assert c.a.b is leaf
    assert c.a is not t.a
    c.insert("a.c", 1, overwrite=True)
    assert "a.c" not in t
    assert type(NamedTensors(x=_tensor()).copy()) is NamedTensors


def test_filter_keys():
    t = make()
    f = t.filter_keys(["a", "c.b.a"])
    assert f.to_dict() == {"a": 0, "c.b.a": 3}
    f2 = t.filter_keys(["b"])
    assert f2.to_dict() == {"b.a": 1, "b.b": 2}
    with pytest.raises(KeyError):
        t.filter_keys(["nope"])


def test_keys_values_lengths():
    t = make()
    assert t.keys() == ["a", "b", "c"]
    assert t.keys_flat() == ["a", "b.a", "b.b", "c.b.a"]
    assert t.values_flat() == [0, 1, 2, 3]
    vals = t.values()
    assert vals[0] == 0 and isinstance(vals[1], DotTree)
    assert t.len() == 3
    assert len(t) == 3
    assert t.len_flat() == 4


def test_from_dict_pack_unpack():
    d = {"b.x": 1, "a": 2, "b.a": 3}
    t = DotTree.from_dict(d)
    assert t.to_dict() == d
    assert list(t.to_dict()) == ["b.x", "b.a", "a"]  # grouped by subtree
    keys, values = t.unpack()
    assert keys == ("a", "b.a", "b.x")  # sorted by key
    assert values == (2, 3, 1)
    p = DotTree.pack(["z", "y.w"], [1, 2])
    assert p.to_dict() == {"z": 1, "y.w": 2}
    assert DotTree.pack(*p.unpack()).to_dict() == {"y.w": 2, "z": 1}
    with pytest.raises(ValueError):
        DotTree.pack(["a"], [1, 2])
    assert type(NamedTensors.from_dict({"a": _tensor()})) is NamedTensors
    assert type(NamedTensors.pack(["a"], [_tensor()])) is NamedTensors


def test_to_mapping():
    a = DotTree.from_dict({"x.w": "aw", "x.b": "ab", "only_a": "o"})
    b = DotTree.from_dict({"x.b": "bb", "x.w": "bw", "only_b": "p"})
    m = a.to_mapping(b)
    assert m == {"aw": "bw", "ab": "bb"}
    assert to_mapping(a, b) == m
    assert b.to_mapping(a) == {"bb": "ab", "bw": "aw"}


def test_map():
    t = make()
    m = t.map(lambda v: v * 10)
    assert m.to_dict() == {"a": 0, "b.a": 10, "b.b": 20, "c.b.a": 30}
    assert t.b.a == 1


def test_clear_keeps_nested_trees():
    parent = DotTree()
    child = DotTree()
    parent.insert("child", child)
    child.insert("w", 1)
    parent.insert("leaf", 2)
    parent._clear()
    assert parent.to_dict() == {}
    assert parent.child is child  # shared reference still valid
    assert "leaf" not in parent
    child.insert("w", 3)  # reinsertion after clear
    assert parent.to_dict() == {"child.w": 3}


def test_clear_nested_multiple_levels():
    t = DotTree()
    t.insert("a.b.c", 1)
    inner = t.a.b
    t._clear()
    assert t.a.b is inner
    assert t.len_flat() == 0


def test_subclasses_keep_type_for_nested():
    t = NamedTensors()
    t.insert("a.b", _tensor())
    assert isinstance(t.a, NamedTensors)
    f = NamedVariableFactories()
    f.insert("x.y", VariableFactory(np.zeros(2)))
    assert isinstance(f.x, NamedVariableFactories)
    d = NamedTensorData(w=np.ones(1))
    assert isinstance(d, DotTree)


def test_pickle_roundtrip():
    import pickle

    t = make()
    t2 = pickle.loads(pickle.dumps(t))
    assert t2.to_dict() == t.to_dict()


def _tensor():
    """A popxl tensor (NamedTensors leaves must be Tensors)."""
    import numpy as np

    import popxl

    ir = popxl.Ir()
    with ir.main_graph:
        return popxl.variable(np.zeros(2, np.float32), name="w")
