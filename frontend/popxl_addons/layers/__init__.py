"""`popxl_addons.layers`: Linear, LayerNorm, GroupNorm, Embedding, Conv2D.

Each layer is an `addons.Module` with named variables (`weight`, `bias`) and a static
`torch_mapping(variables, nn_layer, dtype)` giving a `WeightsDict` that loads the
parameters of the equivalent `torch.nn` layer:

```python
facts, graph = Linear(32).create_graph(x)
variables = facts.init()
...
session.write_variables_data(Linear.torch_mapping(variables, torch.nn.Linear(16, 32)))
```
"""

from popxl_addons.layers.conv import Conv2D
from popxl_addons.layers.embedding import Embedding
from popxl_addons.layers.group_norm import GroupNorm
from popxl_addons.layers.layer_norm import LayerNorm
from popxl_addons.layers.linear import Linear

__all__ = ["Linear", "LayerNorm", "GroupNorm", "Embedding", "Conv2D"]
