"""`popxl.ops.var_updates`: in-place variable updates and optimizer updaters.

The `*_` functions update their first argument `t` in place and return it; `X` is
broadcast to `t`'s shape (a number or array becomes a constant of `t`'s dtype).
Factors (`f`, `step`, `beta1`, ...) may be Python numbers or scalar Tensors: a number
becomes an op property, a Tensor an extra operand read at run time (`Factor` in the
signatures: `float | int | Tensor`).
"""

from popxl.ops._var_updates import (
    accumulate_,
    accumulate_mean_,
    accumulate_moving_average_,
    accumulate_moving_average_square_,
    accumulate_square_,
    accumulator_scale_,
    accumulator_zero_,
    adam_updater,
    adam_var_update,
    adamax_updater,
    copy_var_update_,
    lamb_updater,
    sparse_accumulate_,
)

# The names the implementation exports (`_var_updates.__all__`; test_api_docs checks the two lists agree
# and that this module's namespace is exactly them).
__all__ = [
    "accumulate_",
    "accumulate_mean_",
    "accumulate_moving_average_",
    "accumulate_moving_average_square_",
    "accumulate_square_",
    "accumulator_scale_",
    "accumulator_zero_",
    "adam_updater",
    "adam_var_update",
    "adamax_updater",
    "copy_var_update_",
    "lamb_updater",
    "sparse_accumulate_",
]
