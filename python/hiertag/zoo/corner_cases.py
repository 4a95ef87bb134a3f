"""Small models for what no library model shows. Each builder returns
(model, example args)."""

import warnings

import torch
from torch import nn

from hiertag import checks


def script(function):
    """torch.jit.script, without the deprecation warning torch 2.14 prints for it:
    these corner cases are the TorchScript people wrote and still export."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.script(function)


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


@script
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


class CosTable(nn.Module):
    """A rotary embedding's cos table, as ModernBERT's: computed from its buffer and
    the sequence length alone (a constant of the trace), no value of the input."""

    def __init__(self, width):
        super().__init__()
        frequencies = 1.0 / 10000 ** (torch.arange(0, width, 2, dtype=torch.float32) / width)
        self.register_buffer("inverse_frequency", frequencies, persistent=False)

    def forward(self, x):
        positions = torch.arange(x.shape[-2], dtype=torch.float32)
        angles = torch.outer(positions, self.inverse_frequency)
        return torch.cat((angles, angles), dim=-1).cos()


class RotaryTableTwice(nn.Module):
    """CosTable called once per layer: two calls each computing the same table
    from constants, each call's result read by its own layer."""

    def __init__(self, width=8):
        super().__init__()
        self.table = CosTable(width)
        self.first = Expert(width)
        self.second = Expert(width)

    def forward(self, x):
        x = self.first(x) * self.table(x)
        return self.second(x) * self.table(x)


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


class Head(nn.Module):
    """A classifier head on pooled 2-D features: `flatten(1)` and an eval-mode
    dropout each return their input itself, so the tracer rebinds the caller's
    features once per link; the caller returns the features too."""

    def __init__(self, width=8, classes=3):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(width, classes)

    def forward(self, features):
        return self.fc(self.drop(features.flatten(1)))


class ToFloat(nn.Module):
    """Returns a no-op conversion of its input: the module's result is the alias."""

    def forward(self, x):
        return x.float().contiguous()


@script
def clamp_if_large(x: torch.Tensor) -> torch.Tensor:
    if bool(x.abs().max() > 100.0):
        return x.clamp(-100.0, 100.0)
    return x


class ScriptedClamp(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return self.proj(clamp_if_large(x))


class AliasChains(nn.Module):
    """Tracer aliases through chains of no-op links, through a module whose
    result is the alias, and through a script function returning its argument."""

    def __init__(self, width=8):
        super().__init__()
        self.to_float = ToFloat()
        self.clamp = ScriptedClamp(width)
        self.head = Head(width)

    def forward(self, x):
        x = self.clamp(self.to_float(x)) + x
        return self.head(x), x


class MaskedLayer(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x, mask):
        return self.fc(x) + (1.0 - mask) * -1e4


class CallsSharingWork(nn.Module):
    """One layer applied twice to the same mask: CSE keeps one computation of
    the mask term for both calls."""

    def __init__(self, width=8):
        super().__init__()
        self.layer = MaskedLayer(width)

    def forward(self, x, mask):
        return self.layer(self.layer(x, mask), mask)


class NHWCScale(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x):
        return (x.permute(0, 2, 3, 1) * self.scale).permute(0, 3, 1, 2)


class BatchNormConv(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return self.conv(self.bn(x))


class RewritesAcrossCalls(nn.Module):
    """Export passes that rewrite across two calls of one instance: the first
    call's trailing permute cancels the second's leading one, and the Conv of
    one call absorbs the next call's BatchNorm."""

    def __init__(self, channels=4):
        super().__init__()
        self.scale = NHWCScale(channels)
        self.block = BatchNormConv(channels)

    def forward(self, x):
        return self.block(self.block(self.scale(self.scale(x))))


class PermuteOut(nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1)


class PermuteBack(nn.Module):
    def forward(self, x):
        return x.permute(0, 3, 1, 2) + 1.0


class CancelledPairKept(nn.Module):
    """One module permutes its output, the next permutes it back; the caller
    reads the first's output too, so only the second permute goes, and the next
    module's Add reads the first's input."""

    def __init__(self):
        super().__init__()
        self.out = PermuteOut()
        self.back = PermuteBack()

    def forward(self, x):
        y = self.out(x)
        return self.back(y), y.sum(-1)


class KeyScores(nn.Module):
    """Attention over keys laid out [batch, heads, time, dim]: it transposes
    them itself (k.transpose(-2, -1))."""

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v


class SplitHeads(nn.Module):
    """GPT-style: the caller splits heads with view(...).transpose(1, 2) and
    calls the attention; with keep_keys it also hands its keys out (a cache)."""

    def __init__(self, width=8, heads=2, keep_keys=False):
        super().__init__()
        self.heads, self.keep_keys = heads, keep_keys
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.attention = KeyScores()

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (p(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for p in (self.query, self.key, self.value))
        y = self.attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        return (y, k) if self.keep_keys else y


class TransposesFusedAcrossCalls(nn.Module):
    """torch's ONNX peephole fuses the caller's key transpose into the
    attention's own: the fused Transpose reads the caller's value from before
    its transpose. In the first layer the caller's transpose goes; in the
    second it stays for the keys the layer hands out."""

    def __init__(self, width=8):
        super().__init__()
        self.layers = nn.ModuleList([SplitHeads(width), SplitHeads(width, keep_keys=True)])

    def forward(self, x):
        x = x + self.layers[0](x)
        y, keys = self.layers[1](x)
        return x + y, keys


class ChannelsFirstNorm(nn.LayerNorm):
    """LayerNorm over the channels of [batch, channels, time] (SqueezeBERT's)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 1)).permute(0, 2, 1)


class ConvOutput(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv1d(width, width, 1)
        self.norm = ChannelsFirstNorm(width)

    def forward(self, hidden, residual):
        return self.norm(self.conv(hidden) + residual)


class ConvLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.intermediate = nn.Conv1d(width, width, 1)
        self.output = ConvOutput(width)

    def forward(self, hidden):
        return self.output(torch.relu(self.intermediate(hidden)), hidden)


class ChannelsFirstEncoder(nn.Module):
    def __init__(self, width, layers):
        super().__init__()
        self.layers = nn.ModuleList([ConvLayer(width) for _ in range(layers)])

    def forward(self, x):
        hidden = x.permute(0, 2, 1)
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden.permute(0, 2, 1)


class PermutedEncoder(nn.Module):
    """SqueezeBERT-style: the encoder works channels-first, and the last
    layer's norm permutes back to channels-last only for the encoder to permute
    its result to channels-first again. The exporter cancels that pair, so
    the norm, its output block and the layer all hand out the value from
    before the norm's permute."""

    def __init__(self, width=8, layers=2):
        super().__init__()
        self.encoder = ChannelsFirstEncoder(width, layers)
        self.head = Expert(width)

    def forward(self, x):
        return self.head(self.encoder(x))


class Blocks(nn.ModuleList):
    """A ModuleList subclass: a tagged container whose forward never runs."""


class InterleavedContainer(nn.Module):
    """The owner runs a residual add between the container's children."""

    def __init__(self, width=8):
        super().__init__()
        self.blocks = Blocks([Expert(width) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


class AppliesFunction(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x, function):
        return self.proj(function(x))


class KeepsAttention(nn.Module):
    """Keeps its attention map on itself; the caller reads it afterwards."""

    def __init__(self, width=8):
        super().__init__()
        self.query = nn.Linear(width, width)
        self.last_attention = None

    def forward(self, x):
        attention = torch.softmax(self.query(x) @ x.transpose(-1, -2), -1)
        self.last_attention = attention
        return attention @ x


class CollectsFeatures(nn.Module):
    """Appends its features to a list the caller passed in."""

    def __init__(self, width=8):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x, features: list):
        y = self.proj(x)
        features.append(y)
        return torch.relu(y)


class ScalesInPlace(nn.Module):
    """Changes its input in place and returns something else."""

    def __init__(self, width=8):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        x.mul_(2.0)
        return self.proj(x)


class SideChannels(nn.Module):
    """Values that cross a call other than through its arguments and result: a
    tensor a lambda closes over (converted inside the call: a tracer alias), an
    attribute the callee sets, a list it appends to, an input it changes in place."""

    def __init__(self, width=8):
        super().__init__()
        self.applies = AppliesFunction(width)
        self.keeps = KeepsAttention(width)
        self.collects = CollectsFeatures(width)
        self.scales = ScalesInPlace(width)

    def forward(self, x, bias):
        y = self.applies(x, lambda t: t + bias.float())
        y = self.keeps(y) + self.keeps.last_attention.sum(-1, keepdim=True) + bias
        features = []
        y = self.collects(y, features)
        h = y + 1.0
        return self.scales(h) + h + features[0]


# Classes whose names hold what the tag grammar reserves.
BracketClass = type("Blk[x]", (Expert,), {"__module__": __name__})
DottedClass = type("Block.1", (Expert,), {"__module__": __name__})
SlashClass = type("A/B", (Expert,), {"__module__": __name__})
HashClass = type("H#1", (Expert,), {"__module__": __name__})


class OddClassNames(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.bracket = BracketClass(width)
        self.dotted = DottedClass(width)
        self.slash = SlashClass(width)
        self.hash = HashClass(width)

    def forward(self, x):
        return self.hash(self.slash(self.dotted(self.bracket(x))))


# Names as hostile as Python allows (README "Choices where the contract is
# silent"): what the tag grammar reserves, quotes, control characters (a NUL,
# which torch's own C strings cut names at, DEL and a C1 CSI), "::" and "|"
# (what torch's and hiertag's scope names split at), a name that looks
# absolute ("~"), and letters beyond ASCII. Python names are str: bytes that
# are not UTF-8 arrive only as lone surrogates (os.fsdecode), which torch's
# exporter refuses before hiertag runs, so they have no place here.
HOSTILE_NAMES = ("a/b", "c[d]", "p%q", 'say "hi"', "it's", "line\nbreak", "tab\tstop", "esc\x1b[31m",
                 "nul\x00", "del\x7f", "csi\x9b", "col::on", "pipe|x", "~tilde", "hash#1", "größe", "層")


def _hostile_class(name):
    return type(name, (Expert,), {"__module__": __name__, "__qualname__": name})


class HostileNames(nn.Module):
    """Every hostile name as an attribute name (same-class siblings: Expert[name],
    the name in the qualifier), as a class name (ModuleList items: Name.N), and
    as the names of filtered containers, which show in their children's
    qualifiers (Expert[stack%2F%0A1.0])."""

    def __init__(self, width=8):
        super().__init__()
        for name in HOSTILE_NAMES:
            self.add_module(name, Expert(width))
        # Python refuses a NUL in a class name.
        self.classes = nn.ModuleList(_hostile_class(name)(width) for name in HOSTILE_NAMES if "\x00" not in name)
        self.stacks = ("stack/\n1", "stack[2]")
        for name in self.stacks:
            self.add_module(name, nn.Sequential(Expert(width), Expert(width)))

    def forward(self, x):
        for name in HOSTILE_NAMES + self.stacks:
            x = getattr(self, name)(x)
        for module in self.classes:
            x = module(x)
        return x


# MobileNetV3-Small in torchvision's layout (Howard et al. 2019;
# torchvision/models/mobilenetv3.py, ops/misc.py): Conv-BatchNorm-activation
# blocks as Sequential subclasses, hard-swish, squeeze-excitation gated by a
# hard sigmoid, in-place activations and an in-place residual add. The
# exporter fuses each BatchNorm into its convolution; graph tools then fuse
# further (Conv with its activation, the residual add).

class Conv2dNormActivation(nn.Sequential):
    def __init__(self, inputs, outputs, kernel=3, stride=1, groups=1, activation=nn.ReLU):
        layers = [nn.Conv2d(inputs, outputs, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(outputs, eps=0.001, momentum=0.01)]
        if activation is not None:
            layers.append(activation(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeezed):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class InvertedResidual(nn.Module):
    def __init__(self, inputs, kernel, expanded, outputs, squeeze, activation, stride):
        super().__init__()
        self.use_res_connect = stride == 1 and inputs == outputs
        layers = [Conv2dNormActivation(inputs, expanded, 1, activation=activation)] if expanded != inputs else []
        layers.append(Conv2dNormActivation(expanded, expanded, kernel, stride, expanded, activation))
        if squeeze:
            layers.append(SqueezeExcitation(expanded, _divisible(expanded // 4)))
        layers.append(Conv2dNormActivation(expanded, outputs, 1, activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


def _divisible(channels, divisor=8):
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


class MobileNetV3Style(nn.Module):
    # torchvision's mobilenet_v3_small: (inputs, kernel, expanded, outputs, squeeze-excitation, activation, stride)
    SETTINGS = [(16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2),
                (24, 3, 88, 24, False, nn.ReLU, 1), (24, 5, 96, 40, True, nn.Hardswish, 2),
                (40, 5, 240, 40, True, nn.Hardswish, 1), (40, 5, 240, 40, True, nn.Hardswish, 1),
                (40, 5, 120, 48, True, nn.Hardswish, 1), (48, 5, 144, 48, True, nn.Hardswish, 1),
                (48, 5, 288, 96, True, nn.Hardswish, 2), (96, 5, 576, 96, True, nn.Hardswish, 1),
                (96, 5, 576, 96, True, nn.Hardswish, 1)]

    def __init__(self, classes=10):
        super().__init__()
        layers = [Conv2dNormActivation(3, 16, 3, 2, activation=nn.Hardswish)]
        layers += [InvertedResidual(*setting) for setting in self.SETTINGS]
        layers.append(Conv2dNormActivation(96, 576, 1, activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 128), nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True),
                                        nn.Linear(128, classes))

    def forward(self, pixels):
        return self.classifier(torch.flatten(self.avgpool(self.features(pixels)), 1))


# A GPT-style decoder (nanoGPT's layout) with a LayerNorm written out as its
# arithmetic, as many codebases have it: the normalization ends in a Mul by
# the weight and an Add of the bias, which graph tools fuse or move.

class WrittenLayerNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        variance = (x - mean).pow(2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(variance + self.eps) * self.weight + self.bias


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, length):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.heads = heads
        self.register_buffer("causal", torch.tril(torch.ones(length, length)).view(1, 1, length, length))

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / (width // self.heads) ** 0.5)
        scores = scores.masked_fill(self.causal[:, :, :length, :length] == 0, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(batch, length, width))


class FeedForward(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class GPTBlock(nn.Module):
    def __init__(self, width, heads, length):
        super().__init__()
        self.ln_1 = WrittenLayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, length)
        self.ln_2 = WrittenLayerNorm(width)
        self.mlp = FeedForward(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTStyle(nn.Module):
    def __init__(self, vocab=100, width=32, heads=4, layers=2, length=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(length, width)
        self.h = nn.ModuleList(GPTBlock(width, heads, length) for _ in range(layers))
        self.ln_f = WrittenLayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def trained_like(model, seed=0):
    """Seeded noise on every parameter, and BatchNorm statistics a trained
    network would have: no bias or shift is zero and no scale is one, as in
    trained weights, where a tool cannot drop a node random initialization
    made a no-op (an Add of zeros, a Mul by ones). Returns the model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            spread = float(parameter.std()) if parameter.numel() > 1 else 0.0
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
            parameter.add_((noise * max(0.25 * spread, 0.05)).to(parameter.dtype))
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
                module.running_mean.uniform_(-0.5, 0.5, generator=generator)
                module.running_var.uniform_(0.5, 1.5, generator=generator)
    return model


class Scale(nn.Module):
    """A weight and a shift of its own, and a buffer registered as None."""

    def __init__(self, width=8):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width))
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, width))
        self.register_buffer("unset", None)

    def forward(self, x):
        return x * self.weight + self.shift


class DuplicatedMembers(nn.Module):
    """Two layers whose weights and buffers are equal but distinct tensors: the
    exporter keeps one initializer of each and reads the second layer's through
    an Identity named after it, which the root reads too. The first layer is
    also reachable under a second name (`alias`)."""

    def __init__(self):
        super().__init__()
        self.first = Scale()
        self.second = Scale()
        self.alias = self.first

    def forward(self, x):
        return self.second(self.first(x)) * self.second.weight + self.second.shift


def _rewrites_across_calls():
    model = RewritesAcrossCalls()
    with torch.no_grad():  # statistics a trained BatchNorm would have
        model.block.bn.running_mean.uniform_(-0.5, 0.5)
        model.block.bn.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 4, 3, 3),)


def _scripted_model():
    # torch 2.13 inlines the scripted classes' forward graphs in place on export,
    # so only the first export of a scripted class in a process has the node
    # names of its scopes (README, limitations). Fresh classes per build make
    # every build's export a first one, so exports compare byte for byte.
    def fresh(cls):
        return type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})

    eager = fresh(Scripted)(child_class=fresh(ScriptedChild), inner_class=fresh(Expert)).eval()
    scripted = script(eager)
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
    "rotary_table_twice": lambda: (RotaryTableTwice(), (torch.randn(1, 6, 8),)),
    "reached_past": lambda: (ReachedPast(), _width_input()),
    "alias_chains": lambda: (AliasChains(), _width_input()),
    "calls_sharing_work": lambda: (CallsSharingWork(), (torch.randn(2, 8), torch.ones(2, 8))),
    "rewrites_across_calls": _rewrites_across_calls,
    "cancelled_pair_kept": lambda: (CancelledPairKept(), (torch.randn(1, 4, 2, 2),)),
    "transposes_fused_across_calls": lambda: (TransposesFusedAcrossCalls(), (torch.randn(1, 4, 8),)),
    "permuted_encoder": lambda: (PermutedEncoder(), (torch.randn(1, 4, 8),)),
    "interleaved_container": lambda: (InterleavedContainer(), _width_input()),
    "odd_class_names": lambda: (OddClassNames(), _width_input()),
    "side_channels": lambda: (SideChannels(), (torch.randn(4, 8), torch.randn(4, 8))),
    "hostile_names": lambda: (HostileNames(), _width_input()),
    "mobilenet_v3_style": lambda: (trained_like(MobileNetV3Style()), (torch.randn(1, 3, 64, 64),)),
    "gpt_style": lambda: (trained_like(GPTStyle()), (torch.randint(3, 100, (1, 16)),)),
    "duplicated_members": lambda: (DuplicatedMembers(), _width_input()),
}
