"""`DotTree`: a tree of named leaves addressed with dotted keys (popxl_addons/dot_tree.py).

```python
t = DotTree()
t.insert("layer1.weight", w)      # creates the nested tree `layer1`
t.layer1.weight is t["layer1.weight"] is w
t.to_dict()                       # {'layer1.weight': w}  (flat, insertion order)
```

Keys are Python identifiers or non-negative integers (stored as strings, so
`t[0] is t["0"]`); a negative int counts back from the largest numeric key.
The repr of a tree is the repr of its flat dict, as upstream prints it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["DotTree", "to_mapping"]

L = TypeVar("L")
T = TypeVar("T", bound="DotTree")


def _valid_key_part(part: str) -> bool:
    return part.isidentifier() or part.isdigit()


class DotTree(Generic[L]):
    """A tree whose inner nodes are `DotTree`s and whose leaves are values of type `L`."""

    __slots__ = ("_map",)

    def __init__(self, **kwargs: L | DotTree[L]):
        object.__setattr__(self, "_map", {})
        for k, v in kwargs.items():
            self.insert(k, v)

    # -- keys ------------------------------------------------------------------------
    def _key(self, key: str | int) -> str:
        """Normalise a key: ints to strings, negative ints counted from the largest numeric key."""
        if isinstance(key, bool):
            raise TypeError(f"DotTree keys are str or int, not {key!r}")
        if isinstance(key, int):
            if key < 0:
                numeric = [int(k) for k in self._map if k.isdigit()]
                if not numeric:
                    raise KeyError(key)
                idx = max(numeric) + 1 + key
                if idx < 0 or str(idx) not in self._map:
                    raise KeyError(key)
                return str(idx)
            return str(key)
        if not isinstance(key, str):
            raise TypeError(f"DotTree keys are str or int, not {type(key).__name__}")
        return key

    @staticmethod
    def _split(key: str) -> tuple[str, str | None]:
        first, sep, rest = key.partition(".")
        return first, (rest if sep else None)

    # -- access ----------------------------------------------------------------------
    def get(self, key: str | int) -> L | DotTree[L]:
        """The leaf or subtree at `key` (`"a.b"` walks into subtree `a`). KeyError if absent."""
        key = self._key(key)
        first, rest = self._split(key)
        if first not in self._map:
            raise KeyError(key)
        value = self._map[first]
        if rest is None:
            return value
        if not isinstance(value, DotTree):
            raise KeyError(key)
        try:
            return value.get(rest)
        except KeyError:
            raise KeyError(key) from None

    def __getitem__(self, key: str | int) -> L | DotTree[L]:
        return self.get(key)

    def __getattr__(self, key: str) -> Any:
        # A leaf (`L`) or a subtree, known only at run time: `Any`, as for `argparse.Namespace`.
        # `get` / `[]` return the precise `L | DotTree[L]` for code that narrows.
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        try:
            return self.get(key)
        except KeyError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute or key '{key}'") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"cannot set attribute '{key}' on {type(self).__name__}: use insert('{key}', value)")

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str | int) or isinstance(key, bool):
            return False
        try:
            self.get(key)
        except KeyError:
            return False
        return True

    # -- mutation --------------------------------------------------------------------
    def insert(self, key: str | int, value: L | DotTree[L], overwrite: bool = False) -> None:
        """Insert `value` at `key`, creating nested trees for dotted keys.

        As upstream, a key that exists at any level of `key` ("a" of "a.b") raises
        ValueError unless `overwrite`; with `overwrite` the existing subtrees along `key`
        are extended and the entry at `key` itself (a leaf or a tree) is replaced.
        """
        if isinstance(key, int) and not isinstance(key, bool):
            if key < 0:
                raise ValueError(f"DotTree keys cannot be negative integers: {key}")
            key = str(key)
        if not isinstance(key, str):
            raise TypeError(f"DotTree keys are str or int, not {type(key).__name__}")
        if not isinstance(value, DotTree):
            self._check_leaf(key, value)
        parts = key.split(".")
        for p in parts:
            if not _valid_key_part(p):
                raise ValueError(
                    f"invalid DotTree key '{key}': each dot-separated part must be a "
                    "Python identifier or a non-negative integer"
                )
        first, rest = parts[0], ".".join(parts[1:]) if len(parts) > 1 else None
        if first in self._map and not overwrite:
            raise ValueError(
                f"'{first}' already exists in {type(self).__name__} (inserting '{key}'); pass overwrite=True "
                "to replace or extend it"
            )
        if rest is None:
            self._map[first] = value
            return
        sub = self._map.get(first)
        if not isinstance(sub, DotTree):  # absent, or a leaf that overwrite replaces
            sub = self._new_subtree()
            self._map[first] = sub
        sub.insert(rest, value, overwrite)

    def _place(self, key: str, value: L | DotTree[L]) -> None:
        """Insert `value` at the dotted `key` into the subtrees along it (created when
        absent): what building a tree from flat dotted keys needs (`from_dict`, `pack`,
        `filter_keys`). ValueError when `key` itself exists."""
        if not isinstance(value, DotTree):
            self._check_leaf(key, value)  # named by the whole key
        first, rest = self._split(key)
        if rest is None:
            self.insert(first, value)
            return
        sub = self._map.get(first)
        if sub is None:
            sub = self._new_subtree()
            self.insert(first, sub)
        if not isinstance(sub, DotTree):
            raise ValueError(f"'{first}' already holds a leaf in {type(self).__name__}, cannot insert '{key}'")
        sub._place(rest, value)

    def _new_subtree(self) -> DotTree[L]:
        return type(self)()

    def _check_leaf(self, key: str, value: Any) -> None:
        """Raise TypeError if `value` cannot be a leaf of this kind of tree (any value can)."""

    @staticmethod
    def _check_mapping(what: str, other: Any) -> None:
        if not isinstance(other, DotTree | Mapping):
            raise TypeError(f"{what}: expected a DotTree or a mapping of dotted keys, got {type(other).__name__}")

    def update(self, other: DotTree[L] | Mapping[str, L], overwrite: bool = False) -> None:
        """Insert every top-level entry of `other` (a tree or a flat dotted mapping) with
        `insert` (an existing key raises ValueError unless `overwrite`, which replaces it)."""
        self._check_mapping(f"{type(self).__name__}.update", other)
        if isinstance(other, DotTree):
            items = list(other._map.items())
        else:
            items = list(other.items())
        for k, v in items:
            self.insert(k, v, overwrite)

    def pop(self, key: str | int) -> L | DotTree[L]:
        """Remove and return the leaf or subtree at `key`."""
        key = self._key(key)
        first, rest = self._split(key)
        if first not in self._map:
            raise KeyError(key)
        if rest is None:
            return self._map.pop(first)
        sub = self._map[first]
        if not isinstance(sub, DotTree):
            raise KeyError(key)
        return sub.pop(rest)

    def _clear(self) -> None:
        """Remove every leaf, keeping (emptied) nested trees so shared references stay valid."""
        for k in list(self._map):
            v = self._map[k]
            if isinstance(v, DotTree):
                v._clear()
            else:
                del self._map[k]

    # -- copies and views ------------------------------------------------------------
    def copy(self: T) -> T:
        """Shallow copy: nested trees are copied, leaves are shared."""
        new = type(self)()
        for k, v in self._map.items():
            new._map[k] = v.copy() if isinstance(v, DotTree) else v
        return new

    def filter_keys(self: T, keys: Iterable[str | int]) -> T:
        """A new tree holding only `keys` (dotted keys allowed)."""
        if isinstance(keys, str | int) or not isinstance(keys, Iterable):
            raise TypeError(
                f"{type(self).__name__}.filter_keys: expected an iterable of keys, got {type(keys).__name__}"
            )
        new = type(self)()
        for k in keys:
            if k not in self:
                raise KeyError(f"{type(self).__name__}.filter_keys: no key {k!r} (keys: {', '.join(self.keys_flat())})")
            new._place(self._key(k), self.get(k))
        return new

    def map(self, fn: Callable[[L], Any]) -> DotTree:
        """A new tree of the same structure with `fn` applied to every leaf."""
        new = type(self)()
        for k, v in self._map.items():
            new._map[k] = v.map(fn) if isinstance(v, DotTree) else fn(v)
        return new

    def keys(self) -> list[str]:
        """The top-level keys."""
        return list(self._map.keys())

    def values(self) -> list[L | DotTree[L]]:
        """The top-level values (leaves or subtrees)."""
        return list(self._map.values())

    def items(self) -> list[tuple[str, L | DotTree[L]]]:
        """The top-level `(key, leaf or subtree)` pairs in insertion order (`to_dict()` for dotted leaves)."""
        return list(self._map.items())

    def keys_flat(self) -> list[str]:
        """All leaf keys, dotted, in insertion order."""
        return list(self.to_dict().keys())

    def values_flat(self) -> list[L]:
        """All leaves in insertion order."""
        return list(self.to_dict().values())

    def len(self) -> int:
        """Number of top-level entries."""
        return len(self._map)

    def len_flat(self) -> int:
        """Number of leaves."""
        return len(self.to_dict())

    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        # as upstream, whose DotTree has no length: a tree is true even when empty
        return True

    def __iter__(self):
        return iter(self._map)

    def to_dict(self) -> dict[str, L]:
        """Flat dict of dotted keys to leaves, in insertion order."""
        out: dict[str, L] = {}
        for k, v in self._map.items():
            if isinstance(v, DotTree):
                for sk, sv in v.to_dict().items():
                    out[f"{k}.{sk}"] = sv
            else:
                out[k] = v
        return out

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any], overwrite: bool = False) -> T:
        """A tree from a flat mapping with dotted keys."""
        cls._check_mapping(f"{cls.__name__}.from_dict", d)
        if isinstance(d, DotTree):
            d = d.to_dict()
        tree = cls()
        for k, v in d.items():
            if overwrite:
                tree.insert(k, v, overwrite)
            else:
                tree._place(tree._key(k), v)
        return tree

    @classmethod
    def pack(cls: type[T], keys: Iterable[str | int], values: Iterable[Any]) -> T:
        """A tree from parallel sequences of (dotted) keys and values."""
        for arg, x in (("keys", keys), ("values", values)):
            if isinstance(x, str) or not isinstance(x, Iterable):
                raise TypeError(f"{cls.__name__}.pack: {arg} must be an iterable, got {type(x).__name__}")
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise ValueError(f"pack: {len(keys)} keys but {len(values)} values")
        tree = cls()
        for k, v in zip(keys, values):
            tree._place(tree._key(k), v)
        return tree

    def unpack(self) -> tuple[tuple[str, ...], tuple[L, ...]]:
        """(keys, values) of the leaves, sorted by key."""
        items = sorted(self.to_dict().items(), key=lambda kv: kv[0])
        return tuple(k for k, _ in items), tuple(v for _, v in items)

    def to_mapping(self, other: DotTree) -> dict[L, Any]:
        """`{self_leaf: other_leaf}` for every dotted key the two trees share."""
        self._check_mapping(f"{type(self).__name__}.to_mapping", other)
        mine = self.to_dict()
        theirs = other.to_dict() if isinstance(other, DotTree) else dict(other)
        return {v: theirs[k] for k, v in mine.items() if k in theirs}

    def __repr__(self) -> str:
        """The flat dict of dotted names, as the seed programs print it
        (`{'layer1.bias': Tensor[...], 'layer1.weight': Tensor[...]}`); newer popxl-addons
        releases wrap it in the class name, one entry a line."""
        return repr(self.to_dict())

    def __getstate__(self):
        return self._map

    def __setstate__(self, state):
        object.__setattr__(self, "_map", state)


def to_mapping(key_tree: DotTree, value_tree: DotTree) -> dict:
    """`{key_tree leaf: value_tree leaf}` for every dotted key both trees share."""
    return key_tree.to_mapping(value_tree)
