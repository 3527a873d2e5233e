"""`popart._internal`: the parts of PopART's internal Python bindings that PopXL programs
and their tests touch (`popart._internal.ir`)."""
