"""Small models for what no library model shows. Each builder returns
(model, example args)."""

import torch
from torch import nn

from hiertag import checks


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


class Attention(nn.Module):
    """Ops of its own in forward (not only in children)."""

    def __init__(self, width):
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)

    def forward(self, q, k, v, mask=None):
        scores = self.query(q) @ self.key(k).transpose(-1, -2) / 2.0
        if mask is not None:
            scores = scores + mask
        return torch.softmax(scores, dim=-1) @ v


class DirectAttentionCall(nn.Module):
    """The third-party pattern `sublayer = lambda x: self.attention.forward(x, x, x, mask=mask)`:
    a child entered through .forward(), whose own ops torch records in the caller."""

    def __init__(self, width=8):
        super().__init__()
        self.attention = Attention(width)
        self.out = Expert(width)

    def forward(self, x, mask):
        sublayer = lambda y: self.attention.forward(y, y, y, mask=mask)  # noqa: E731
        return self.out(x + sublayer(x))


class SublayerConnection(nn.Module):
    """Annotated Transformer: a residual connection around any sublayer it is given."""

    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x, sublayer):
        return x + sublayer(self.norm(x))


class EncoderLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.self_attn = Attention(width)
        self.feed_forward = Expert(width)
        self.sublayer = nn.ModuleList([SublayerConnection(width) for _ in range(2)])

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayer[1](x, self.feed_forward)


class AnnotatedTransformer(nn.Module):
    """Modules owned by a layer but called inside a sibling's forward: the call
    tree is not the module tree."""

    def __init__(self, width=8):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(width) for _ in range(2)])

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class SharedLayerStack(nn.Module):
    """ALBERT-style: one layer instance applied several times, with other work between."""

    def __init__(self, width=8, repeats=3):
        super().__init__()
        self.layer = Block(width)
        self.repeats = repeats

    def forward(self, x):
        for step in range(self.repeats):
            x = self.layer(x) * (step + 1.0)
        return x


class CustomConv(nn.Conv2d):
    """A library's own Conv2d subclass: a tagged module of its own."""

    def forward(self, x):
        return super().forward(x)


class ConvBatchNorm(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.conv = CustomConv(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.act = Activation()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Activation(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class ChannelsLast(nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1)


class ChannelsFirst(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels, 1, 1))

    def forward(self, x):
        return x.permute(0, 3, 1, 2) * self.scale


class CrossModuleRewrites(nn.Module):
    """Export passes that rewrite across module boundaries: Conv+BatchNorm
    fusion where the Conv is a module of its own and the BatchNorm its
    parent's, and a permute in one module cancelled by the inverse permute in
    the next."""

    def __init__(self, channels=4):
        super().__init__()
        self.stem = ConvBatchNorm(channels)
        self.to_last = ChannelsLast()
        self.to_first = ChannelsFirst(channels)

    def forward(self, x):
        return self.to_first(self.to_last(self.stem(x)))


class CastingNorm(nn.Module):
    """transformers' RMSNorm: `.to(torch.float32)` on a float32 input returns
    the same tensor, so the tracer rebinds the caller's variable to the Cast."""

    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * x.to(dtype)


class AliasingBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = CastingNorm(width)
        self.mlp = Expert(width)

    def forward(self, x):
        residual = x
        return residual + self.mlp(self.norm(x))


class TracerAlias(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.layers = nn.ModuleList([AliasingBlock(width) for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class SinusoidalPositions(nn.Module):
    """Depends only on shapes: the exporter folds its whole computation."""

    def __init__(self, width):
        super().__init__()
        self.width = width

    def forward(self, length: int):
        position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, self.width, 2, dtype=torch.float32) * -0.5)
        return torch.cat([torch.sin(position * frequency), torch.cos(position * frequency)], dim=-1)


class FoldedModule(nn.Module):
    def __init__(self, width=8, length=6):
        super().__init__()
        self.positions = SinusoidalPositions(width)
        self.proj = Expert(width)
        self.length = length

    def forward(self, x):
        return self.proj(x + self.positions(self.length))


class Stack(nn.Module):
    """A container with a forward of its own that its owner never calls."""

    def __init__(self, width):
        super().__init__()
        self.blocks = nn.ModuleList([Expert(width) for _ in range(2)])

    def forward(self, x):
        raise AssertionError("never called")


class ReachedPast(nn.Module):
    """transformers' OPTForCausalLM calls self.model.decoder, never self.model:
    the caller reaches past a container it owns."""

    def __init__(self, width=8):
        super().__init__()
        self.stack = Stack(width)

    def forward(self, x):
        for block in self.stack.blocks:
            x = block(x)
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
    checks.register_eager_twin(scripted, eager)
    return scripted, _width_input()


def _cross_module_rewrites():
    model = CrossModuleRewrites()
    with torch.no_grad():  # statistics a trained BatchNorm would have
        model.stem.bn.running_mean.uniform_(-0.5, 0.5)
        model.stem.bn.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 4, 6, 6),)


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
    "direct_attention_call": lambda: (DirectAttentionCall(), (torch.randn(1, 4, 8), torch.zeros(1, 4, 4))),
    "annotated_transformer": lambda: (AnnotatedTransformer(), (torch.randn(1, 4, 8), torch.zeros(1, 4, 4))),
    "shared_layer_stack": lambda: (SharedLayerStack(), _width_input()),
    "cross_module_rewrites": _cross_module_rewrites,
    "tracer_alias": lambda: (TracerAlias(), (torch.randn(1, 4, 8),)),
    "folded_module": lambda: (FoldedModule(), (torch.randn(1, 6, 8),)),
    "reached_past": lambda: (ReachedPast(), _width_input()),
}
