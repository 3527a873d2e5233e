"""Gradient rules of the popxl neural-network ops, registered by op class (see `xl.passes.grad_rules`)."""

from __future__ import annotations
