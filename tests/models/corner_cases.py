"""Small models for what no library model shows. Each builder returns
(model, example args)."""

import torch
from torch import nn

from scripts import hiertag_checks


class Expert(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.proj(x))


class Containers(nn.Module):
    """Nested ModuleList / ModuleDict / Sequential, same-class siblings."""

    def __init__(self, width=8):
        super().__init__()
        self.stages = nn.ModuleList([nn.Sequential(Expert(width), Expert(width)) for _ in range(2)])
        self.heads = nn.ModuleDict({"left": Expert(width), "right": Expert(width)})

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.heads["left"](x) * self.heads["right"](x)


class CalledTwice(nn.Module):
    """One module instance called twice, and functional ops in the root."""

    def __init__(self, width=8):
        super().__init__()
        self.shared = Expert(width)

    def forward(self, x):
        y = self.shared(x)
        z = self.shared(y * 2.0)
        return torch.softmax(z + y, dim=-1)


class Norm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.scale = Expert(width)

    def forward(self, x):
        return self.scale(self.norm(x))


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.pre = Norm(width)
        self.ff = Expert(width)

    def forward(self, x):
        return x + self.ff(self.pre(x))


class DirectForward(nn.Module):
    """Children called through .forward() directly: torch records no scope for
    those calls, only for the modules they call normally."""

    def __init__(self, width=8):
        super().__init__()
        self.blocks = nn.ModuleList([Block(width) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block.forward(x)
        return x


class ScriptedChild(nn.Module):
    def __init__(self, width, inner_class=Expert):
        super().__init__()
        self.inner = inner_class(width)

    def forward(self, x):
        return self.inner(x) + 1.0


class Scripted(nn.Module):
    """Exported as a whole scripted model (torch.jit.script)."""

    def __init__(self, width=8, child_class=ScriptedChild, inner_class=Expert):
        super().__init__()
        self.layers = nn.ModuleList([child_class(width, inner_class) for _ in range(2)])
        self.out = nn.Linear(width, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


@torch.jit.script
def repeat_double(x: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    for _ in range(int(times)):
        x = x * 2.0
    return x


class LoopLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.proj(repeat_double(x, x.new_tensor(2).long())))


class ScriptedLoop(nn.Module):
    """A scripted function with a data-dependent loop, called from traced layers."""

    def __init__(self, width=8):
        super().__init__()
        self.layers = nn.ModuleList([LoopLayer(width) for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class ClampGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def symbolic(g, x):
        low = g.op("Constant", value_t=torch.tensor(-1.0))
        high = g.op("Constant", value_t=torch.tensor(1.0))
        return g.op("Clip", x, low, high)


class Clamped(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return ClampGrad.apply(self.proj(x))


class AutogradSymbolic(nn.Module):
    """An autograd Function with a symbolic staticmethod inside a submodule."""

    def __init__(self, width=8):
        super().__init__()
        self.layers = nn.ModuleList([Clamped(width) for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class PositionalLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x, pos):
        steps = pos.size(0)
        return self.proj(x) + pos.reshape(steps, -1)[:, :1]


class SharedSubexpression(nn.Module):
    """Every layer takes size(0) of the same tensor: torch's CSE merges those
    nodes of different layers into one."""

    def __init__(self, width=8):
        super().__init__()
        self.layers = nn.ModuleList([PositionalLayer(width) for _ in range(2)])

    def forward(self, x, pos):
        for layer in self.layers:
            x = layer(x, pos)
        return x


def _scripted_model():
    # torch 2.13 inlines the scripted classes' forward graphs in place on export,
    # so only the first export of a scripted class in a process has the node
    # names of its scopes (README, limitations). Fresh classes per build make
    # every build's export a first one, so exports compare byte for byte.
    def fresh(cls):
        return type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})

    eager = fresh(Scripted)(child_class=fresh(ScriptedChild), inner_class=fresh(Expert)).eval()
    scripted = torch.jit.script(eager)
    hiertag_checks.register_eager_twin(scripted, eager)
    return scripted, _width_input()


def _width_input(batch=4, width=8):
    return (torch.randn(batch, width),)


MODELS = {
    "containers": lambda: (Containers(), _width_input()),
    "called_twice": lambda: (CalledTwice(), _width_input()),
    "direct_forward": lambda: (DirectForward(), _width_input()),
    "scripted_model": _scripted_model,
    "scripted_loop": lambda: (ScriptedLoop(), _width_input()),
    "autograd_symbolic": lambda: (AutogradSymbolic(), _width_input()),
    "shared_subexpression": lambda: (SharedSubexpression(), (torch.randn(4, 8), torch.randn(4, 3))),
}
