"""Seed 001 (popxl.addons basic concepts) run verbatim.

Each code block below is copied character for character from the seed
(`shared/seeds/001_*.txt`, "A simple example" to "DotTree example"); only the
`import torch`/`import torchvision` lines are dropped when running. The printed text is
compared with the seed's output blocks, normalising only `0x...` addresses and op ids
(`MatMul.100` -> `MatMul.N`) and trailing spaces. The Linear/Net results are then checked
against NumPy with the session's own weights.
"""

import contextlib
import io
import re

import numpy as np
import pytest

# ---------------------------------------------------------------------------------------
# Seed 001 code and output blocks (verbatim)
# ---------------------------------------------------------------------------------------

IMPORTS = r"""from tqdm import tqdm
import torchvision
import torch
import numpy as np
from typing import Mapping, Optional
from functools import partial

np.random.seed(42)

import popxl.ops as ops
import popxl_addons as addons
import popxl
"""

LINEAR = r"""class Linear(addons.Module):
    def __init__(self, out_features: int, bias: bool = True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        # add a state variable to the module
        w = self.add_variable_input(
            "weight",
            partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)),
            x.dtype,
        )
        y = x @ w
        if self.bias:
            # add a state variable to the module
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype)
            y = y + b

        return y
"""

IR = r"""ir = popxl.Ir(replication=1)
"""

LINEAR_MAIN = r"""with ir.main_graph:
    # create a variable factory and a graph from the module
    facts, linear_graph = Linear(32).create_graph(
        popxl.TensorSpec((2, 4), popxl.float32)
    )
    print("factories: \n", facts)
    print("\n graph: \n", linear_graph.print_schedule())

    # since we are in the main graph, we can instantiate variables using the factories
    variables = facts.init()
    print("\n variables: \n", variables)

    # and bind our graph to these variables that live in the main graph.
    bound_graph = linear_graph.bind(variables)

    # the bound graph can be called providing only unnamed inputs x
    input_data = np.asarray(np.random.rand(2, 4)).astype(np.float32)
    input_tensor = popxl.variable(input_data, name="x")

    out = bound_graph.call(input_tensor)
"""

LINEAR_OUT = r"""factories:
 {'weight': <popxl_addons.variable_factory.VariableFactory object at 0x7feaf5cb1160>, 'bias': <popxl_addons.variable_factory.VariableFactory object at 0x7fe851acee10>}

 graph:
 Graph : Linear_subgraph(0)
  (%1, weight=%2, bias=%3) -> (%5) {
    MatMul.100 (%1 [(2, 4) float32], %2 [(4, 32) float32]) -> (%4 [(2, 32) float32])
    Add.101 (%4 [(2, 32) float32], %3 [(32,) float32]) -> (%5 [(2, 32) float32])
  }

 variables:
 {'bias': Tensor[bias popxl.dtypes.float32 (32,)], 'weight': Tensor[weight popxl.dtypes.float32 (4, 32)]}
"""

SESSION = r"""ir.num_host_transfers = 1

# Create a session to run your IR
session = popxl.Session(ir, "ipu_hw")

# Run the program
with session:
    session.run()
"""

BOUND = r"""ir = popxl.Ir()
with ir.main_graph:
    facts, linear_graph = Linear(32).create_graph(
        popxl.TensorSpec((2, 4), popxl.float32)
    )

    variables1 = facts.init()
    variables2 = facts.init()

    # the same subgraph can be bound to different variables,
    # generating distinct bound graph objects.
    bound_graph1 = linear_graph.bind(variables1)
    bound_graph2 = linear_graph.bind(variables2)

    print("\n two different bound graphs: \n", bound_graph1, bound_graph2)

    input_data = np.asarray(np.random.rand(2, 4)).astype(np.float32)
    input_tensor = popxl.variable(input_data, name="x")

    out = bound_graph1.call(input_tensor)
"""

BOUND_OUT = r"""
 two different bound graphs:
 <popxl_addons.graph.BoundGraph object at 0x7fe851b717b8> <popxl_addons.graph.BoundGraph object at 0x7fe851c3b4a8>
"""

NET = r"""class Net(addons.Module):
    def __init__(self, cache: Optional[addons.GraphCache] = None):
        super().__init__(cache=cache)
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)
        self.fc3 = Linear(512)
        self.fc4 = Linear(10)

    def build(self, x: popxl.Tensor):
        x = x.reshape((-1, 28 * 28))
        x = ops.gelu(self.fc1(x))
        x = ops.gelu(self.fc2(x))
        x = ops.gelu(self.fc3(x))
        x = self.fc4(x)
        return x


ir = popxl.Ir()
main = ir.main_graph
with main:
    facts, net_graph = Net().create_graph(popxl.TensorSpec((28, 28), popxl.float32))
    print(facts.to_dict().keys())
    print("\n", net_graph.print_schedule())
"""

NET_OUT = r"""dict_keys(['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias', 'fc3.weight', 'fc3.bias', 'fc4.weight', 'fc4.bias'])

 Graph : Net_subgraph(0)
  (%1, fc1.weight=%2, fc1.bias=%3, fc2.weight=%4, fc2.bias=%5, fc3.weight=%6, fc3.bias=%7, fc4.weight=%8, fc4.bias=%9) -> (%21) {
    Reshape.100 (%1 [(28, 28) float32]) -> (%10 [(1, 784) float32])
    MatMul.101 (%10 [(1, 784) float32], %2 [(784, 512) float32]) -> (%11 [(1, 512) float32])
    Add.102 (%11 [(1, 512) float32], %3 [(512,) float32]) -> (%12 [(1, 512) float32])
    Gelu.103 (%12 [(1, 512) float32]) -> (%13 [(1, 512) float32])
    MatMul.104 (%13 [(1, 512) float32], %4 [(512, 512) float32]) -> (%14 [(1, 512) float32])
    Add.105 (%14 [(1, 512) float32], %5 [(512,) float32]) -> (%15 [(1, 512) float32])
    Gelu.106 (%15 [(1, 512) float32]) -> (%16 [(1, 512) float32])
    MatMul.107 (%16 [(1, 512) float32], %6 [(512, 512) float32]) -> (%17 [(1, 512) float32])
    Add.108 (%17 [(1, 512) float32], %7 [(512,) float32]) -> (%18 [(1, 512) float32])
    Gelu.109 (%18 [(1, 512) float32]) -> (%19 [(1, 512) float32])
    MatMul.110 (%19 [(1, 512) float32], %8 [(512, 10) float32]) -> (%20 [(1, 10) float32])
    Add.111 (%20 [(1, 10) float32], %9 [(10,) float32]) -> (%21 [(1, 10) float32])
  }
"""

OUTLINED = r"""class NetOutlined(addons.Module):
    def __init__(self, cache: Optional[addons.GraphCache] = None):
        super().__init__(cache=cache)
        # first and last layer are not reused
        self.fc1 = Linear(512)
        self.fc4 = Linear(10)

    def build(self, x: popxl.Tensor):
        x = x.reshape((-1, 28 * 28))
        x = ops.gelu(self.fc1(x))

        # create a single subgraph to be used both for fc2 and fc3
        # create variable factories and subgraph
        facts, subgraph = Linear(512).create_graph(x)
        # generate specific named inputs for fc2
        named_tensors_0 = self.add_variable_inputs("fc2", facts)
        # fc2 is a bound graph using the shared, single subgraph and custom params
        fc2 = subgraph.bind(named_tensors_0)
        # generate specific named inputs for fc3
        named_tensors_1 = self.add_variable_inputs("fc3", facts)
        # fc3 is a bound graph using the shared, single subgraph and custom params
        fc3 = subgraph.bind(named_tensors_1)

        (x,) = fc2.call(x)
        x = ops.gelu(x)
        (x,) = fc3.call(x)
        x = ops.gelu(x)

        x = self.fc4(x)
        return x


ir = popxl.Ir()
with ir.main_graph:
    args, net_graph = NetOutlined().create_graph(
        popxl.TensorSpec((28, 28), popxl.float32)
    )
    print(args.to_dict().keys())
    print("\n", net_graph.print_schedule())
"""

OUTLINED_OUT = r"""dict_keys(['fc1.weight', 'fc1.bias', 'fc4.weight', 'fc4.bias', 'fc2.weight', 'fc2.bias', 'fc3.weight', 'fc3.bias'])

 Graph : NetOutlined_subgraph(0)
  (%1, fc1.weight=%2, fc1.bias=%3, fc2.weight=%4, fc2.bias=%5, fc3.weight=%6, fc3.bias=%7, fc4.weight=%8, fc4.bias=%9) -> (%19) {
    Reshape.100 (%1 [(28, 28) float32]) -> (%10 [(1, 784) float32])
    MatMul.101 (%10 [(1, 784) float32], %2 [(784, 512) float32]) -> (%11 [(1, 512) float32])
    Add.102 (%11 [(1, 512) float32], %3 [(512,) float32]) -> (%12 [(1, 512) float32])
    Gelu.103 (%12 [(1, 512) float32]) -> (%13 [(1, 512) float32])
    Call.106(Linear_subgraph(1)) (%13 [(1, 512) float32], %4 [(512, 512) float32], %5 [(512,) float32]) -> (%14 [(1, 512) float32])
    Gelu.107 (%14 [(1, 512) float32]) -> (%15 [(1, 512) float32])
    Call.108(Linear_subgraph(1)) (%15 [(1, 512) float32], %6 [(512, 512) float32], %7 [(512,) float32]) -> (%16 [(1, 512) float32])
    Gelu.109 (%16 [(1, 512) float32]) -> (%17 [(1, 512) float32])
    MatMul.110 (%17 [(1, 512) float32], %8 [(512, 10) float32]) -> (%18 [(1, 10) float32])
    Add.111 (%18 [(1, 10) float32], %9 [(10,) float32]) -> (%19 [(1, 10) float32])
  }
"""

DOTTREE = r"""ir = popxl.Ir(replication=1)

with ir.main_graph:
    facts, linear_graph = Linear(32).create_graph(
        popxl.TensorSpec((2, 4), popxl.float32)
    )
    variables = facts.init()
    variables2 = facts.init()

    print("----- DotTree functionalities -----\n")
    collection = addons.NamedTensors()  # empty collection
    collection.insert("layer1", variables)  # add a new key with the insert method
    collection.insert("layer2", variables2)
    print(
        "A nested collection: the nested structure appear from the dot structure of names"
    )
    print(collection, "\n")  # nested structure
    print("Each leaf can be accessed with dot syntax: collection.layer1")
    print(
        collection.layer1
    )  # each leaf node in the tree can be accessed with dot syntax
    collection_dict = collection.to_dict()  # convert the collection to dictionary

    nt = addons.NamedTensors.from_dict(
        {"x": input_tensor}
    )  # create the collection from a dictionary
    nt_b = addons.NamedTensors.from_dict({"b": variables.bias})
    nt.update(
        nt_b
    )  # update the collection with another collection, keys should not repeat
    # print("\n",nt)

    names = ["new_bias_name", "new_weight_name"]
    nt_from_lists = addons.NamedTensors.pack(
        names, variables.tensors
    )  # create the collection from a list
    names, tensors = nt_from_lists.unpack()
    # print("\n",nt_from_lists)

    print("\n")

    # ----- NamedTensors specific -----
    print("----- NamedTensors -----\n")
    print(collection.named_tensors, "\n")  # same as to_dict, specific of NamedTensors
    print("Get only tensors, sorted by name")
    print(collection.tensors)  # returns tensors, sorted by names
"""

DOTTREE_OUT = r"""----- DotTree functionalities -----

A nested collection: the nested structure appear from the dot structure of names
{'layer1.bias': Tensor[bias popxl.dtypes.float32 (32,)], 'layer1.weight': Tensor[weight popxl.dtypes.float32 (4, 32)], 'layer2.bias': Tensor[bias__t0 popxl.dtypes.float32 (32,)], 'layer2.weight': Tensor[weight__t1 popxl.dtypes.float32 (4, 32)]}

Each leaf can be accessed with dot syntax: collection.layer1
{'bias': Tensor[bias popxl.dtypes.float32 (32,)], 'weight': Tensor[weight popxl.dtypes.float32 (4, 32)]}


----- NamedTensors -----

{'layer1.bias': Tensor[bias popxl.dtypes.float32 (32,)], 'layer1.weight': Tensor[weight popxl.dtypes.float32 (4, 32)], 'layer2.bias': Tensor[bias__t0 popxl.dtypes.float32 (32,)], 'layer2.weight': Tensor[weight__t1 popxl.dtypes.float32 (4, 32)]}

Get only tensors, sorted by name
(Tensor[bias popxl.dtypes.float32 (32,)], Tensor[bias__t0 popxl.dtypes.float32 (32,)], Tensor[weight popxl.dtypes.float32 (4, 32)], Tensor[weight__t1 popxl.dtypes.float32 (4, 32)])
"""

# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------

_SKIP_IMPORTS = {"import torch", "import torchvision"}


def _code(block: str) -> str:
    return "\n".join(l for l in block.splitlines() if l.strip() not in _SKIP_IMPORTS) + "\n"


def run(block: str, ns: dict) -> str:
    """exec a seed block in the notebook-like namespace `ns`; return what it printed."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(_code(block), "<seed 001>", "exec"), ns)
    return buf.getvalue()


def norm(text: str) -> list[str]:
    """Only object addresses are normalised: op ids must match the seed exactly."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    lines = [l.rstrip() for l in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def assert_same(actual: str, expected: str) -> None:
    assert norm(actual) == norm(expected)


def new_ns() -> dict:
    ns = {"__name__": "__main__"}
    run(IMPORTS, ns)
    run(LINEAR, ns)
    return ns


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def need_session():
    import popxl

    if not hasattr(popxl, "Session"):
        pytest.skip("popxl.Session not available yet")


# ---------------------------------------------------------------------------------------
# Printed output
# ---------------------------------------------------------------------------------------


def test_linear_prints():
    ns = new_ns()
    run(IR, ns)
    assert_same(run(LINEAR_MAIN, ns), LINEAR_OUT)


def test_two_bound_graphs_prints():
    ns = new_ns()
    out = run(BOUND, ns)
    assert_same(out, BOUND_OUT)
    assert ns["bound_graph1"] is not ns["bound_graph2"]
    assert ns["bound_graph1"].graph == ns["bound_graph2"].graph


def test_net_prints():
    ns = new_ns()
    assert_same(run(NET, ns), NET_OUT)


def test_net_outlined_prints():
    ns = new_ns()
    assert_same(run(OUTLINED, ns), OUTLINED_OUT)


def test_dot_tree_prints():
    ns = new_ns()
    run(IR, ns)
    run(LINEAR_MAIN, ns)
    assert_same(run(DOTTREE, ns), DOTTREE_OUT)
    # the rest of the block's API calls did what the comments say
    assert ns["nt"].to_dict() == {"x": ns["input_tensor"], "b": ns["variables"].bias}
    assert ns["names"] == ("new_bias_name", "new_weight_name")
    assert ns["collection_dict"] == ns["collection"].to_dict()


def test_exact_op_ids_when_numbered_like_popart():
    """Op ids are globally increasing per Ir from 100: the outlined Linear graph's two ops
    take 104 and 105, so the calls are 106 and 108 as in the seed."""
    ns = new_ns()
    out = run(OUTLINED, ns)
    ids = [int(m) for m in re.findall(r"^\s+\w+\.(\d+)", out, re.M)]
    assert ids == [100, 101, 102, 103, 106, 107, 108, 109, 110, 111]


# ---------------------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------------------


def test_linear_session_numerics():
    ns = new_ns()
    run(IR, ns)
    run(LINEAR_MAIN, ns)
    need_session()
    import popxl
    import popxl.ops as ops

    ir, out = ns["ir"], ns["out"]
    with ir.main_graph:
        (y,) = out
        stream = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(stream, y)
    run(SESSION, ns)  # the seed's own session block: ir_hw session, run()
    session = ns["session"]
    with session:
        result = session.run()[stream]
    v = ns["variables"]
    w = session.get_tensor_data(v.weight)
    b = session.get_tensor_data(v.bias)
    assert w.shape == (4, 32) and b.shape == (32,)
    assert np.all(b == 0) and 0.005 < float(w.std()) < 0.05
    np.testing.assert_allclose(result, ns["input_data"] @ w + b, rtol=1e-5, atol=1e-6)


def _net_numerics(cls_name: str):
    ns = new_ns()
    run(NET, ns)
    if cls_name == "NetOutlined":
        run(OUTLINED, ns)
    need_session()
    import popxl
    import popxl.ops as ops

    x_data = np.random.default_rng(0).normal(size=(28, 28)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = ns[cls_name]().create_graph(popxl.TensorSpec((28, 28), popxl.float32))
        variables = facts.init()
        x = popxl.variable(x_data, name="x")
        (y,) = graph.bind(variables).call(x)
        stream = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(stream, y)
    ir.num_host_transfers = 1
    session = popxl.Session(ir, "ipu_hw")
    with session:
        result = session.run()[stream]
    w = {k: session.get_tensor_data(t) for k, t in variables.to_dict().items()}
    h = x_data.reshape(1, 784)
    for i in (1, 2, 3):
        h = gelu(h @ w[f"fc{i}.weight"] + w[f"fc{i}.bias"])
    expect = h @ w["fc4.weight"] + w["fc4.bias"]
    assert result.shape == (1, 10)
    np.testing.assert_allclose(result, expect, rtol=1e-4, atol=1e-5)


def test_net_session_numerics():
    _net_numerics("Net")


def test_net_outlined_session_numerics():
    _net_numerics("NetOutlined")
