"""Printing programs without their large constants, as `mlir-opt --mlir-elide-elementsattrs-if-larger`.

A `dense<...>` attribute with more than `N` elements prints as ``dense_resource<__elided__>``
followed by its type::

    %w = graph.variable "fc1.weight" = dense_resource<__elided__> : tensor<784x512xf32>

The elided text is for reading: xl's parser (`xl-opt`, `xl-run`) refuses it with a
located message (the values are gone). `shorten_message` applies the same idea to error
messages that embed printed attributes. Used by the frontend (`Ir.to_mlir`) and the tools,
so it lives below both.
"""

from __future__ import annotations

import io
import re
from typing import IO

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import Attribute, Operation
from xdsl.printer import Printer

__all__ = [
    "ELIDED",
    "ElidingPrinter",
    "MESSAGE_ELIDE_LIMIT",
    "print_op",
    "shorten_message",
]

ELIDED = "dense_resource<__elided__>"
"""How an elided attribute prints (MLIR's spelling)."""

MESSAGE_ELIDE_LIMIT = 16
"""Dense attributes with more elements are elided in error messages."""


def _num_elements(attr: DenseIntOrFPElementsAttr) -> int:
    n = 1
    for d in attr.type.get_shape():
        n *= max(int(d), 0)
    return n


class ElidingPrinter(Printer):
    """A `Printer` that elides dense attributes with more than `elide_larger_than` elements
    (None: elides nothing)."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        elide_larger_than: int | None = None,
        print_generic_format: bool = False,
        print_debuginfo: bool = False,
    ) -> None:
        super().__init__(
            stream=stream,
            print_generic_format=print_generic_format,
            print_debuginfo=print_debuginfo,
        )
        self.elide_larger_than = elide_larger_than

    def print_attribute(self, attribute: Attribute) -> None:
        """Print `attribute`; a dense one of more than `elide_larger_than` elements as `ELIDED`."""
        limit = self.elide_larger_than
        if limit is not None and isinstance(attribute, DenseIntOrFPElementsAttr) and _num_elements(attribute) > limit:
            self.print_string(f"{ELIDED} : ")
            self.print_attribute(attribute.get_type())
            return
        super().print_attribute(attribute)


def print_op(
    op: Operation,
    *,
    elide_larger_than: int | None = None,
    print_generic_format: bool = False,
    print_debuginfo: bool = False,
) -> str:
    """`op` as text, large dense attributes elided (see `ElidingPrinter`)."""
    out = io.StringIO()
    ElidingPrinter(
        out,
        elide_larger_than=elide_larger_than,
        print_generic_format=print_generic_format,
        print_debuginfo=print_debuginfo,
    ).print_op(op)
    return out.getvalue()


_DENSE_LITERAL = re.compile(r"dense<[^<>]{200,}+>")
"""A printed `dense<...>` literal of more than 200 characters (possessive: linear time)."""


def shorten_message(text: str) -> str:
    """`text` with every long printed `dense<...>` literal replaced by `ELIDED`, so that an
    error message quoting a trained weight stays short."""
    if "dense<" not in text:
        return text
    return _DENSE_LITERAL.sub(ELIDED, text)
