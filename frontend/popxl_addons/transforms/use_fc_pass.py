"""`popxl_addons.transforms.use_fc_pass` (upstream's module path): `enable_fc_pass` /
`disable_fc_pass`, defined in `popxl_addons.tuning` (no-ops on NumPy: there is no
fully-connected pass to switch)."""

from popxl_addons.tuning import disable_fc_pass, enable_fc_pass

__all__ = ["disable_fc_pass", "enable_fc_pass"]
