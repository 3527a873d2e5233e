"""`xl_context()`: an xDSL context that knows the builtin dialects and every xl dialect.

Defined in `xl.dialects` (the frontend and the compiler use it too, and sit below the
tools); re-exported here for the tools.
"""

from xl.dialects import xl_context

__all__ = ["xl_context"]
