"""Facts about the floating-point formats the float8 scale searches work with
(popxl_addons.ops.fp8_utils): one `FpDef` per format."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FpDef", "float8_143_def", "float8_152_def", "ieee_fp16_denorms", "ieee_fp32_no_denorms"]


class FpDef(NamedTuple):
    """A floating-point format."""

    num_exp_bits: int
    num_mantissa_bits: int
    fix_exponent_bias: int
    include_denorm: bool  # whether subnormal values are counted
    has_nans: bool  # whether a whole exponent code is kept for NaN / inf
    max_value: float  # the largest finite value
    max_exp: int  # the exponents of normal values span [min_exp, max_exp]
    min_exp: int


#: IEEE float32, its subnormal values not counted.
ieee_fp32_no_denorms = FpDef(8, 23, 127, False, True, 3.4028235e38, 127, -126)
#: IEEE float16, its subnormal values counted.
ieee_fp16_denorms = FpDef(5, 10, 15, True, True, 65504.0, 15, -14)
#: `popxl.float8_152`: 5 exponent bits, 2 mantissa bits, bias 16, no infinities.
float8_152_def = FpDef(5, 2, 16, True, False, 57344.0, 15, -17)
#: `popxl.float8_143`: 4 exponent bits, 3 mantissa bits, bias 8, no infinities.
float8_143_def = FpDef(4, 3, 8, True, False, 240.0, 7, -10)
