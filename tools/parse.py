"""Parsing textual IR for `xl-opt` and `xl-run`: linear-time, located, and keeping locations.

`parse_source` wraps xDSL's `Parser` with three guarantees the tools rely on:

- **Linear time.** xDSL 0.74 lexes a string literal with a regular expression whose nested
  quantifier backtracks exponentially when the closing quote is missing (a stray `"`
  followed by 40 characters never finishes). `XlLexer` uses the same grammar with
  possessive quantifiers, which cannot backtrack.
- **Every failure is a located `ParseError`.** Bytes that are not UTF-8 are reported at
  their line and column; an exception raised inside the parser (for example an
  `OverflowError` for `dense<1.0> : tensor<99999999999999999999xf32>`, or an assertion
  inside a dense literal) becomes a `ParseError` at the start of the op being parsed;
  a `VerifyException` raised while an op is built keeps its type (so that
  `--verify-diagnostics` prints it) and gets the op's position (`as_parse_error`).
- **Undefined values are reported where they are used.** A value used but never defined is
  a `ParseError` at its first use (xDSL reports it at the end of the input).
- **Ops remember where they came from.** An op without an explicit `loc(...)` gets
  `loc("file":line:col)` of its first token, so verifier errors can point at the source
  and `--print-debuginfo` prints real locations.

A dense float literal keeps the values written as bit patterns (`dense<[0x7FC00000, 1.0]> :
tensor<2xf32>`: NaN, infinities, float8's NaN, as printed), which xDSL reads as integers.

A float attribute of a type xDSL has no number format for (`1.0 : f80`, `f128`) is refused
where it is written: xDSL parses it but cannot print it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyDenseElement,
    AnyFloat,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    DenseResourceAttr,
    FileLineColLoc,
    FloatAttr,
    IntAttr,
    ModuleOp,
    RankedStructure,
    StringAttr,
    UnknownLoc,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import AttributeInvT
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.parser.attribute_parser import AttrParser
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from xl.dialects.utils import numpy_dtype

__all__ = [
    "SPAN_ATTR",
    "XlLexer",
    "XlParser",
    "as_parse_error",
    "decode_source",
    "describe_exception",
    "parse_source",
]

SPAN_ATTR = "xl_span"
"""Attribute set on a `VerifyException` raised while an op was parsed: the op's position."""


def as_parse_error(e: BaseException) -> ParseError | None:
    """A `VerifyException` raised while parsing, as a located `ParseError` (else None)."""
    span = getattr(e, SPAN_ATTR, None)
    if span is None:
        return None
    msg = str(e).split("\n", 1)[0].strip() or type(e).__name__
    return ParseError(span, msg)


class XlLexer(MLIRLexer):
    """xDSL's MLIR lexer with a string-literal pattern that cannot backtrack.

    The grammar is unchanged (escapes `\\n`, `\\t`, `\\\\`, `\\"` and two hex digits);
    the possessive `++` / `*+` make a failed match cost time linear in its length.
    """

    _unescaped_characters_regex = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')


def describe_exception(e: BaseException) -> str:
    """A one-line message for an exception raised where a `ParseError` was expected."""
    msg = str(e).strip()
    if isinstance(e, OverflowError):
        return f"number too large ({msg})" if msg else "number too large"
    if isinstance(e, MemoryError):
        return "out of memory while parsing this op (a literal or a shape too large)"
    if isinstance(e, NotImplementedError):
        return "a type or literal xDSL cannot represent (NotImplementedError)"
    if isinstance(e, AssertionError | IndexError | KeyError | AttributeError) or not msg:
        detail = f": {msg}" if msg and msg != type(e).__name__ else ""
        return f"malformed input (internal {type(e).__name__}{detail})"
    return msg


def decode_source(data: bytes | str, name: str) -> str:
    """`data` as text; bytes that are not UTF-8 raise a `ParseError` at their line:col."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        # Locate the bad byte in a text where every undecodable byte is one character.
        text = data.decode("utf-8", errors="replace")
        prefix = data[: e.start].decode("utf-8", errors="replace")
        span = Span(len(prefix), len(prefix) + 1, Input(text, name))
        raise ParseError(span, f"invalid UTF-8 byte 0x{data[e.start]:02x}: the input must be UTF-8 text") from None


class _HexBits(AttrParser._TensorLiteralElement):
    """An element of a dense literal written in hexadecimal: for a float type, its bits
    (`XlParser.parse_dense_int_or_fp_elements_attr` writes them; 0.0 until then)."""

    def to_type(self, parser: AttrParser, type: Any) -> Any:
        if isinstance(type, AnyFloat):
            return 0.0
        return super().to_type(parser, type)


class XlParser(Parser):
    """`Parser` with `XlLexer`, located internal errors and source locations on ops.

    `line_offset` is added to every line number (for `--split-input-file` chunks).
    """

    def __init__(self, ctx: Context, input: str | bytes, name: str = "<unknown>", line_offset: int = 0) -> None:
        text = decode_source(input, name)
        # Parser.__init__ would lex the first token with MLIRLexer: build the state here.
        super(Parser, self).__init__(ParserState(XlLexer(Input(text, name))), ctx)
        self.ssa_values = {}
        self.blocks = {}
        self.forward_block_references = defaultdict(list)
        self.forward_ssa_references = {}
        self._line_offset = line_offset
        self._file_attr = StringAttr(name)
        self._counted_pos = 0
        self._counted_lines = 0
        self._first_use: dict[str, Span[str]] = {}
        """Where each value used before its definition is first used."""
        self._dense_elements: list[AttrParser._TensorLiteralElement] | None = None
        """The elements of the dense literal being parsed (see `_HexBits`)."""

    def _location_of(self, span: Span[str]) -> FileLineColLoc:
        """`loc("file":line:col)` of `span`; lines are counted incrementally, since ops
        come in increasing positions (a count from the start each time is quadratic)."""
        text, pos = span.input.content, span.start
        if pos < self._counted_pos:
            self._counted_pos, self._counted_lines = 0, 0
        self._counted_lines += text.count("\n", self._counted_pos, pos)
        self._counted_pos = pos
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        line = self._counted_lines + 1 + self._line_offset
        return FileLineColLoc(self._file_attr, IntAttr(line), IntAttr(col))

    def _parse_builtin_dense_resource_attr(self) -> DenseResourceAttr:
        """`dense_resource<__elided__>` (printed by `--elide-elementsattrs-if-larger`) is
        refused: its values are gone."""
        start = self._current_token.span
        state = self._parser_state
        text = state.lexer.input.content
        rest = text[start.start : start.start + 40]
        if re.match(r"<\s*__elided__\s*>", rest):
            end = text.index(">", start.start) + 1
            raise ParseError(
                Span(start.start - len("dense_resource"), end, start.input),
                "this constant was elided when the program was printed "
                "(dense_resource<__elided__>, from --elide-elementsattrs-if-larger or "
                "to_mlir(elide_larger_than=...)): its values are not in the text. Print the "
                "program without elision, or keep the weights in an .npz "
                "(to_mlir(weights=...), xl-run --vars)",
            )
        return super()._parse_builtin_dense_resource_attr()

    # -- hexadecimal float literals in dense attributes ------------------------------------
    # MLIR writes a float that has no decimal form (NaN, +-inf, float8's NaN) as its bit
    # pattern: `dense<[0x7FC00000, 1.0]> : tensor<2xf32>`, as xDSL prints it. xDSL 0.74 reads
    # such a literal as the integer it spells (0x7FC00000 -> 2143289344.0), so NaN and inf
    # changed value through the text. Here the hexadecimal elements of a float literal are
    # recorded while it is parsed and their bits written into the attribute afterwards.

    def _parse_tensor_literal_element(self) -> AttrParser._TensorLiteralElement:
        token = self._current_token
        element = super()._parse_tensor_literal_element()
        elements = self._dense_elements
        if elements is not None:
            if token.kind == MLIRTokenKind.INTEGER_LIT and token.text[:2].lower() == "0x":
                element = _HexBits(element.is_negative, element.value, element.span)
            elements.append(element)
        return element

    def parse_dense_int_or_fp_elements_attr(
        self, type: RankedStructure[AnyDenseElement] | None
    ) -> DenseIntOrFPElementsAttr:
        outer, self._dense_elements = self._dense_elements, []
        elements = self._dense_elements
        try:
            attr = super().parse_dense_int_or_fp_elements_attr(type)
        finally:
            self._dense_elements = outer
        hexes = [(i, e) for i, e in enumerate(elements) if isinstance(e, _HexBits)]
        elem = attr.get_element_type()
        if not hexes or not isinstance(elem, AnyFloat):
            return attr
        try:
            width = numpy_dtype(elem).itemsize
        except TypeError:  # a type the runtime has no dtype for (bf16, f80): xDSL's reading
            return attr
        bits = np.frombuffer(attr.data.data, dtype=f"u{width}").copy()
        for i, e in hexes:
            value = e.value
            assert isinstance(value, int)
            if value >= 1 << (8 * width):
                raise ParseError(e.span, f"hexadecimal literal {e.span.text} has more bits than {elem} ({8 * width})")
            if len(elements) == 1:  # a splat
                bits[:] = value
            else:
                bits[i] = value
        return DenseIntOrFPElementsAttr(attr.type, BytesAttr(bits.tobytes()))

    def parse_optional_builtin_int_or_float_attr(self):  # noqa: ANN201 - xDSL's signature
        start = self._current_token.span
        attr = super().parse_optional_builtin_int_or_float_attr()
        if isinstance(attr, FloatAttr):
            try:
                attr.type.pack([attr.value.data])
            except NotImplementedError:
                end = self._current_token.span.start
                raise ParseError(
                    Span(start.start, max(end, start.end), start.input),
                    f"a float attribute of type {attr.type}: xDSL cannot represent {attr.type} values "
                    "(use f16, bf16, f32 or f64)",
                ) from None
        return attr

    def _internal_error(self, e: Exception, span: Span[str] | None = None) -> ParseError:
        return ParseError(span or self._current_token.span, describe_exception(e))

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except ParseError:
            raise
        except DiagnosticException as e:
            # An op verifying its types while it is built (xDSL raises VerifyException):
            # kept as it is (`--verify-diagnostics` prints it), with the op's position.
            if getattr(e, SPAN_ATTR, None) is None:
                setattr(e, SPAN_ATTR, start)
            raise
        except RecursionError:
            raise ParseError(start, "operations nested too deeply") from None
        except Exception as e:  # noqa: BLE001 - any parser failure is reported located
            raise self._internal_error(e, start) from e
        if isinstance(op.location, UnknownLoc):
            op.location = self._location_of(start)
        return op

    def resolve_operand(self, operand: UnresolvedOperand, type: AttributeInvT) -> SSAValue[AttributeInvT]:
        name = operand.operand_name
        if name not in self.ssa_values and name not in self._first_use:
            self._first_use[name] = operand.span
        return super().resolve_operand(operand, type)

    def _undefined_values(self) -> ParseError | None:
        """The values used but never defined, reported at the first use of the first one
        (xDSL reports them at the end of the input)."""
        names = [n for n in self.forward_ssa_references if n in self._first_use]
        if not names:
            return None
        names.sort(key=lambda n: self._first_use[n].start)
        others = ", ".join(f"%{n}" for n in names[1:])
        also = f" (also undefined: {others})" if others else ""
        return ParseError(self._first_use[names[0]], f"use of undefined value %{names[0]}{also}")

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as e:
            if e.msg.startswith("values used but not defined") and (located := self._undefined_values()):
                raise located from None
            raise
        except DiagnosticException:
            raise
        except RecursionError:
            raise ParseError(self._current_token.span, "input nested too deeply") from None
        except Exception as e:  # noqa: BLE001
            raise self._internal_error(e) from e


def parse_source(
    ctx: Context,
    data: str | bytes,
    name: str,
    *,
    allow_implicit_module: bool = True,
    line_offset: int = 0,
) -> ModuleOp:
    """Parses a whole module (see the module docstring for the guarantees)."""
    return XlParser(ctx, data, name, line_offset).parse_module(allow_implicit_module)
