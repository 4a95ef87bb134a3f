"""hiertag export: export a HuggingFace model with every node tagged.

usage: hiertag export MODEL -o OUT.onnx [--config JSON] [--task TASK] [--input NAME=SPEC ...]
                      [--opset N] [--torch-modules 0|1|A,B] [--json]

MODEL is one of
  BertModel, transformers:CLASS   a transformers model class (or a config class, with --task)
                                  built from --config (JSON of the config's arguments) with
                                  random weights, seeded: nothing is downloaded
  DIRECTORY                       a local directory with config.json (save_pretrained):
                                  its weights are loaded when present, else random ones
  HUB_ID (bert-base-uncased)      a model already in the local HuggingFace cache (never
                                  downloaded: a model not cached is an error)
  path/to/file.py:FUNCTION        FUNCTION() returns (model, args) as torch.onnx.export takes them

Example inputs are built from the config, by the forward's parameters: input_ids
(batch 1, 16 tokens) with an all-ones attention_mask, decoder_input_ids (and an
all-ones decoder_attention_mask) for encoder-decoders, pixel_values from the
(vision) config's num_channels and image_size, input_values (a waveform, or a
spectrogram when the config has num_mel_bins and max_length) and input_features
(whisper-style: num_mel_bins x 2*max_source_positions; speech2text-style: frames x
input_feat_per_channel). --input NAME=SPEC replaces or adds one: SPEC is
DTYPE[D0,D1,...] with an optional range for integers (int64[1,32]:0..1000),
float32[1,3,224,224], or ones[1,32] (int64 ones). The graph's inputs are exactly
those tensors, under their parameter names.

The file is written beside OUT, checked with `hiertag validate` and renamed to
OUT only then; on any error nothing is left. Prints `OUT: N nodes tagged, M
modules (MODEL)` and the module tree to depth 2 (--json: one JSON object).
Exit status 0, or 2 with one line on stderr."""

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import hiertag
from hiertag import native, verbs

# --task NAME -> transformers Auto class (aliases share one).
TASKS = {
    "feature-extraction": "AutoModel",
    "text-classification": "AutoModelForSequenceClassification",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "masked-lm": "AutoModelForMaskedLM",
    "fill-mask": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "text-generation": "AutoModelForCausalLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "text2text-generation": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
    "semantic-segmentation": "AutoModelForSemanticSegmentation",
    "audio-classification": "AutoModelForAudioClassification",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
    "ctc": "AutoModelForCTC",
}

_TEXT_LENGTH, _DECODER_LENGTH, _AUDIO_FRAMES = 16, 8, 32
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


class ExportError(verbs.UsageError):
    """Bad input, or a model that cannot be exported: one line, exit status 2."""


def fail(message):
    raise ExportError(message)


def _first_line(error):
    text = str(error).strip()
    line = text.splitlines()[0].strip() if text else ""
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


@contextlib.contextmanager
def quiet():
    """Silences the block: Python warnings, transformers' logging and whatever
    torch and its C++ code print on stdout and stderr (the exporter dumps its
    whole graph when a conversion fails). Yields a list that holds, after the
    block, the text printed on the file descriptors."""
    import logging
    sys.stdout.flush()
    sys.stderr.flush()
    printed = []
    saved = []
    sink = tempfile.TemporaryFile()
    try:
        for fd in (1, 2):
            saved.append((fd, os.dup(fd)))
            os.dup2(sink.fileno(), fd)
    except OSError:  # no real file descriptors (an embedding host): Python-level silence only
        pass
    previous_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield printed
    finally:
        logging.disable(previous_disable)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        sink.seek(0)
        printed.append(sink.read().decode(errors="replace"))
        sink.close()


# ---------------------------------------------------------------------------
# The model


def _transformers():
    with quiet():
        import transformers
    return transformers


def _transformers_class(name):
    """The transformers model or config class `name`, or None."""
    transformers = _transformers()
    try:
        with quiet():
            found = getattr(transformers, name, None)
    except Exception:  # a lazy import whose backend is missing
        return None
    if isinstance(found, type) and issubclass(found, (transformers.PreTrainedModel, transformers.PretrainedConfig)):
        return found
    return None


def _auto_class(task):
    if task not in TASKS:
        fail(f"unknown --task '{task}' (one of {', '.join(TASKS)})")
    return getattr(_transformers(), TASKS[task])


def _parse_config(config):
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as error:
        fail(f"bad --config JSON: {error}")
    if not isinstance(parsed, dict):
        fail(f"bad --config: expected a JSON object of config arguments, got {type(parsed).__name__}")
    return parsed


def _model_from_config(model_class, config, label):
    """A model with random weights (seeded) for `config`: model_class is a
    PreTrainedModel class or an Auto class."""
    import torch
    transformers = _transformers()
    torch.manual_seed(0)
    try:
        with quiet():
            if issubclass(model_class, transformers.PreTrainedModel):
                return model_class(config)
            return model_class.from_config(config)  # an Auto class
    except Exception as error:
        fail(f"cannot build {label} from its config: {_first_line(error)}")


def _model_from_class(name, config, task):
    transformers = _transformers()
    found = _transformers_class(name)
    if found is None:
        fail(f"unknown model '{name}': no transformers model or config class of that name")
    arguments = _parse_config(config)
    if issubclass(found, transformers.PretrainedConfig):
        config_class, model_class = found, (_auto_class(task) if task else transformers.AutoModel)
    else:
        if task:
            fail(f"--task picks the head for a config class, directory or hub id; '{name}' already names one")
        config_class, model_class = getattr(found, "config_class", None), found
        if not (isinstance(config_class, type) and issubclass(config_class, transformers.PretrainedConfig)
                and config_class is not transformers.PretrainedConfig):
            model_type = getattr(config_class, "model_type", "")
            config_class = transformers.CONFIG_MAPPING.get(model_type) if model_type else None
        if config_class is None:
            fail(f"'{name}' names no config class to build it from")
    try:
        with quiet():
            model_config = config_class(**arguments)
    except Exception as error:
        fail(f"bad --config for {config_class.__name__}: {_first_line(error)}")
    return _model_from_config(model_class, model_config, name)


def _has_weights(directory):
    return any((directory / name).exists() for name in _WEIGHT_FILES) or any(directory.glob("*.safetensors"))


def _cached_config(repo_id):
    """Whether the hub id's config.json is in the local cache."""
    try:
        from huggingface_hub import try_to_load_from_cache
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False


def _pretrained(source, config, task, local_directory):
    """A model from a save_pretrained directory or the local hub cache."""
    import torch
    transformers = _transformers()
    overrides = _parse_config(config)
    try:
        with quiet():
            model_config = transformers.AutoConfig.from_pretrained(source, local_files_only=True, **overrides)
    except Exception as error:
        if local_directory or _cached_config(source):
            fail(f"cannot read the config of {source}: {_first_line(error)}")
        fail(f"unknown model '{source}': not a transformers class, a directory or FILE.py:FUNCTION, and "
             "not in the local HuggingFace cache (nothing is downloaded)")
    if task:
        model_class = _auto_class(task)
    else:
        architectures = getattr(model_config, "architectures", None) or []
        model_class = next((c for c in map(_transformers_class, architectures) if c is not None
                            and issubclass(c, transformers.PreTrainedModel)), None) or transformers.AutoModel
    if local_directory and not _has_weights(Path(source)):
        return _model_from_config(model_class, model_config, str(source))
    torch.manual_seed(0)  # a head the checkpoint lacks starts from seeded random weights
    try:
        with quiet():
            return model_class.from_pretrained(source, config=model_config, local_files_only=True,
                                               dtype=torch.float32)
    except Exception as error:
        if local_directory:
            fail(f"cannot load the weights of {source}: {_first_line(error)}")
        fail(f"the weights of '{source}' are not in the local HuggingFace cache (nothing is downloaded): "
             f"{_first_line(error)}")


def _from_file(path, function):
    if not Path(path).is_file():
        fail(f"no file '{path}'")
    try:
        with quiet():
            name = Path(path).stem if Path(path).stem.isidentifier() else "exported_model"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(name, module)  # classes defined there resolve their module
            spec.loader.exec_module(module)
    except Exception as error:
        fail(f"cannot load {path}: {_first_line(error)}")
    if not callable(getattr(module, function, None)):
        fail(f"{path} has no function '{function}'")
    try:
        with quiet():
            result = getattr(module, function)()
    except Exception as error:
        fail(f"{path}:{function}() failed: {_first_line(error)}")
    if not (isinstance(result, tuple) and len(result) == 2):
        fail(f"{path}:{function}() must return (model, args)")
    model, args = result
    import torch
    if not isinstance(model, torch.nn.Module):
        fail(f"{path}:{function}() returned {type(model).__name__}, not a torch.nn.Module")
    if isinstance(args, torch.Tensor):
        args = (args,)
    args = tuple(args) if isinstance(args, list) else args
    return _narrow_to_arguments(prepare(model), args), args


def _narrow_to_arguments(model, args):
    """A FILE.py model's forward narrowed (bind_inputs) to the parameters its
    arguments supply, positionally then by keyword, so the defaults of the
    others stay defaults instead of becoming graph inputs. Left alone when the
    arguments do not bind by name (a scripted model, *args, unknown keywords)."""
    import torch
    if isinstance(model, torch.jit.ScriptModule) or not isinstance(args, tuple) or not args:
        return model
    keywords = args[-1] if isinstance(args[-1], dict) else {}
    positional = args[:-1] if isinstance(args[-1], dict) else args
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return model
    named = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) > len(named) or any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return model
    names = [p.name for p in named[:len(positional)]]
    by_keyword = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(key not in by_keyword or key in names for key in keywords):
        return model
    return bind_inputs(model, names + [p.name for p in parameters if p.name in keywords])


def _is_file_spec(spec):
    path, sep, function = str(spec).rpartition(":")
    return bool(sep) and path.endswith(".py") and function.isidentifier()


def _load_model(spec, config, task):
    spec = str(spec)
    if spec.startswith("transformers:"):
        return _model_from_class(spec.partition(":")[2], config, task)
    if Path(spec).is_dir():
        if not (Path(spec) / "config.json").is_file():
            fail(f"directory '{spec}' has no config.json (expected a save_pretrained directory)")
        return _pretrained(spec, config, task, local_directory=True)
    if spec.isidentifier() and _transformers_class(spec) is not None:
        return _model_from_class(spec, config, task)
    if spec.isidentifier() and spec[0].isupper():
        fail(f"unknown model '{spec}': no transformers model or config class of that name")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", spec):
        fail(f"unknown model '{spec}': not a transformers class, a directory, FILE.py:FUNCTION or a hub id")
    return _pretrained(spec, config, task, local_directory=False)


def prepare_for_torchscript_export(model):
    """transformers 5 re-adds use_cache as a keyword while the TorchScript
    exporter passes every argument positionally ("got multiple values for
    argument 'use_cache'", also without hiertag); a config without use_cache
    avoids it. Export wants no key/value cache anyway."""
    if getattr(getattr(model, "config", None), "use_cache", None) is not None:
        object.__setattr__(model.config, "use_cache", None)
    return model


def prepare(model):
    """Export settings, once for every transformers/TorchScript clash: eval
    mode, and no key/value cache in any (sub)config: transformers 5 re-adds
    use_cache as a keyword while the exporter passes every argument
    positionally ("got multiple values for argument 'use_cache'")."""
    model.eval()
    for module in model.modules():
        if hasattr(module, "config"):
            prepare_for_torchscript_export(module)
    return model


# ---------------------------------------------------------------------------
# Example inputs


def parse_input_spec(spec):
    """NAME=SPEC -> (NAME, tensor). SPEC: DTYPE[D0,D1,...] (random, seeded), with
    LOW..HIGH for integers (int64[1,16]:0..1000), or ones[D0,...] (int64 ones)."""
    import torch
    found = re.fullmatch(r"([A-Za-z_][\w.]*)=(\w+)\[([\d,\s]*)\](?::(-?\d+)\.\.(-?\d+))?", spec)
    if not found:
        fail(f"bad --input '{spec}' (expected NAME=DTYPE[D0,D1,...] or NAME=int64[...]:LOW..HIGH)")
    name, dtype, dims, low, high = found.groups()
    shape = [int(d) for d in dims.split(",") if d.strip()]
    generator = torch.Generator().manual_seed(1)
    try:
        if dtype == "ones":
            return name, torch.ones(shape, dtype=torch.long)
        if dtype.startswith("int") and isinstance(getattr(torch, dtype, None), torch.dtype):
            return name, torch.randint(int(low or 0), int(high or 100), shape, generator=generator,
                                       dtype=getattr(torch, dtype))
        if dtype.startswith("float") and isinstance(getattr(torch, dtype, None), torch.dtype):
            return name, torch.randn(shape, generator=generator, dtype=getattr(torch, dtype))
    except (TypeError, RuntimeError, ValueError) as error:
        fail(f"bad --input '{spec}': {_first_line(error)}")
    fail(f"unknown dtype '{dtype}' in --input '{spec}'")


def _attr(config, names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _generator(seed):
    import torch
    return torch.Generator().manual_seed(seed)


def _token_ids(vocab, batch, length, seed, what):
    import torch
    if not isinstance(vocab, int) or vocab < 1:
        fail(f"the config gives no vocab_size for {what}: give it with --input {what}=int64[{batch},{length}]:0..VOCAB")
    low = 3 if vocab > 3 else 0
    return torch.randint(low, vocab, (batch, length), generator=_generator(seed))


def _length(config, wanted, names):
    limit = _attr(config, names)
    return min(wanted, limit) if isinstance(limit, int) and limit > 0 else wanted


def _image_size(config):
    size = _attr(config, ["image_size", "img_size", "input_size"], 224)
    if isinstance(size, dict):
        size = (size.get("height", size.get("shortest_edge", 224)), size.get("width", size.get("shortest_edge", 224)))
    if isinstance(size, (list, tuple)):
        size = tuple(size[-2:]) if len(size) >= 2 else (size[0], size[0])
    else:
        size = (int(size), int(size))
    return size


def _sub_config(config, name):
    sub = getattr(config, name, None)
    return sub if sub is not None and not isinstance(sub, dict) else config


def _waveform_samples(config):
    """Samples for _AUDIO_FRAMES frames out of the config's convolution stack
    (wav2vec2/hubert-like feature encoders), else one second at 16 kHz."""
    strides, kernels = getattr(config, "conv_stride", None), getattr(config, "conv_kernel", None)
    if not strides or not kernels or len(strides) != len(kernels):
        return 16000
    length = _AUDIO_FRAMES
    for stride, kernel in zip(reversed(strides), reversed(kernels)):
        length = (length - 1) * stride + kernel
    return length


def _default_input(name, config, made, batch):
    """The example tensor for forward parameter `name`, or None when the
    config says nothing about it. `made` holds the inputs decided so far."""
    import torch
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if name == "input_ids":
        return _token_ids(_attr(text, ["vocab_size"]), batch,
                          _length(text, _TEXT_LENGTH, ["max_position_embeddings", "n_positions", "n_ctx"]), 1, name)
    if name == "decoder_input_ids" and getattr(config, "is_encoder_decoder", False):
        decoder = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        length = _length(decoder, _DECODER_LENGTH, ["max_target_positions", "max_position_embeddings", "n_positions"])
        return _token_ids(_attr(config, ["decoder_vocab_size"]) or _attr(decoder, ["vocab_size"]), batch, length, 2,
                          name)
    if name == "attention_mask" and "input_ids" in made:
        return torch.ones_like(made["input_ids"])
    if name == "decoder_attention_mask" and "decoder_input_ids" in made:
        return torch.ones_like(made["decoder_input_ids"])
    if name == "pixel_values":
        vision = _sub_config(config, "vision_config")
        height, width = _image_size(vision)
        channels = _attr(vision, ["num_channels", "in_channels", "in_chans"], 3)
        return torch.randn(batch, channels, height, width, generator=_generator(3))
    if name == "input_values":
        if getattr(config, "num_mel_bins", None) and getattr(config, "max_length", None):
            # a spectrogram patch model (AST-like): (batch, time, mel bins)
            return torch.randn(batch, config.max_length, config.num_mel_bins, generator=_generator(4))
        return torch.randn(batch, _waveform_samples(config), generator=_generator(4))
    if name == "input_features":
        audio = _sub_config(config, "audio_config")
        mel, positions = getattr(audio, "num_mel_bins", None), getattr(audio, "max_source_positions", None)
        if mel and positions:
            # whisper-like: (batch, mel bins, frames); two convolutions, the second of stride 2
            return torch.randn(batch, mel, 2 * positions, generator=_generator(4))
        per_channel = getattr(audio, "input_feat_per_channel", None)
        if per_channel:
            # speech2text-like: (batch, frames, features)
            frames = _length(audio, _AUDIO_FRAMES, ["max_source_positions"])
            return torch.randn(batch, frames, per_channel * (getattr(audio, "input_channels", 1) or 1),
                               generator=_generator(4))
    return None


# The inputs built when the forward takes them, in this order (masks follow
# what they mask); any other parameter is built only when asked with --input.
_DEFAULT_INPUTS = ("input_ids", "pixel_values", "input_values", "input_features", "attention_mask",
                   "decoder_input_ids", "decoder_attention_mask")


def _forward_parameters(model):
    signature = inspect.signature(type(model).forward)
    return {name: p for name, p in list(signature.parameters.items())[1:]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def example_inputs(model, inputs=()):
    """{forward parameter: tensor} in the forward's order: the --input specs
    first, the rest from the config (_DEFAULT_INPUTS)."""
    parameters = _forward_parameters(model)
    given = {}
    for spec in inputs:
        name, tensor = parse_input_spec(spec) if isinstance(spec, str) else spec
        if name not in parameters:
            fail(f"unknown input '{name}': {type(model).__name__}.forward takes "
                 f"{', '.join(parameters) or 'no named parameters'}")
        given[name] = tensor
    made = dict(given)
    # the batch of the inputs given, else 1
    batch = next((t.shape[0] for t in given.values() if getattr(t, "ndim", 0) >= 1), 1)
    config = getattr(model, "config", None)
    if config is not None:
        for name in _DEFAULT_INPUTS:
            if name in parameters and name not in made:
                tensor = _default_input(name, config, made, batch)
                if tensor is not None:
                    made[name] = tensor
    missing = [name for name, p in parameters.items() if p.default is p.empty and name not in made]
    if missing:
        fail(f"no example input for {', '.join(missing)} of {type(model).__name__}.forward: "
             f"give it with --input {missing[0]}=DTYPE[...]")
    if not made:
        fail(f"no example inputs for {type(model).__name__}: give them with --input NAME=SPEC")
    return {name: made[name] for name in parameters if name in made}


def bind_inputs(model, names):
    """Narrows the instance's forward to exactly `names`, called by keyword.

    The exporter (_decide_input_format) fills every parameter after the given
    ones with its default and passes them all positionally: a plain default
    (GPT-2's logits_to_keep=0) becomes a graph input, and use_cache clashes
    with the keyword transformers re-adds. The instance's forward becomes a
    function taking exactly `names` that calls the class's forward with them
    as keywords (and use_cache=False where the forward takes it: no key/value
    cache in the graph). The module itself, its class and its children are
    unchanged, so the tags are those of the plain export."""
    bound = model.forward
    parameters = inspect.signature(bound).parameters
    fixed = {"use_cache": False} if "use_cache" in parameters and "use_cache" not in names else {}
    outputs = []

    def forward(*args, **kwargs):
        kwargs.update(zip(names, args))
        try:
            result = bound(**fixed, **kwargs)
        except Exception as error:
            with contextlib.suppress(AttributeError):
                error.hiertag_raised_by_model = True  # the model's code failed, not the exporter
            raise
        outputs[:] = _output_names(result, names)
        return result

    forward.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
    forward.__name__ = "forward"
    forward.__doc__ = f"{type(model).__name__}.forward on {', '.join(names)} (hiertag export)"
    forward.hiertag_inputs = list(names)
    # The names of the last call's outputs: the fields of a ModelOutput or dict
    # (last_hidden_state, text_model_output.pooler_output, ...), else empty.
    forward.hiertag_outputs = outputs
    model.forward = forward
    return model


def build(model_spec, config=None, task=None, inputs=()):
    """(model, args): the eval-mode model and its example arguments as
    torch.onnx.export takes them, (first tensor, {name: tensor, ...}).

    model_spec: a transformers class ("BertModel", "transformers:BertModel", or a
    config class with task), a save_pretrained directory, a hub id in the local
    cache, or "file.py:FUNCTION" (its arguments as the function returns them).
    config: a dict or JSON string of config arguments; task: a TASKS name;
    inputs: "NAME=SPEC" strings (or (name, tensor) pairs) replacing or adding
    example inputs. The instance's forward is narrowed to the parameters the
    arguments supply (bind_inputs), so the graph's inputs are exactly them;
    the model's class, modules and weights are untouched."""
    if _is_file_spec(model_spec):
        path, _, function = str(model_spec).rpartition(":")
        for option, value in (("--config", config), ("--task", task), ("--input", list(inputs))):
            if value:
                fail(f"{option} does not apply to FILE.py:FUNCTION (the function returns the model and its arguments)")
        return _from_file(path, function)
    model = prepare(_load_model(model_spec, config, task))
    chosen = example_inputs(model, inputs)
    names = list(chosen)
    bind_inputs(model, names)
    first, rest = chosen[names[0]], {name: chosen[name] for name in names[1:]}
    return model, ((first, rest) if rest else (first,))


# ---------------------------------------------------------------------------
# Export


def _flat_outputs(value, prefix, out):
    """The dotted names of the tensors in `value`, in the order the tracer
    flattens them (dict values in order, sequences by index, None dropped)."""
    import torch
    if isinstance(value, torch.Tensor):
        out.append(prefix)
    elif isinstance(value, dict):
        for key, item in value.items():
            _flat_outputs(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _flat_outputs(item, f"{prefix}.{index}" if prefix else f"output{index}", out)
    elif value is not None:
        raise TypeError(type(value).__name__)
    return out


def _output_names(result, input_names):
    """Names for a forward's outputs when it returns a ModelOutput or dict,
    else [] (torch names them)."""
    if not isinstance(result, dict):
        return []
    try:
        names = _flat_outputs(result, "", [])
    except TypeError:
        return []
    if len(set(names)) != len(names) or set(names) & set(input_names):
        return []
    return names


def _input_files(model_spec):
    """The files building `model_spec` reads that an output could name: a
    FILE.py, or a save_pretrained directory's files (its ONNX files aside)."""
    if _is_file_spec(model_spec):
        return [str(model_spec).rpartition(":")[0]]
    if Path(str(model_spec)).is_dir():
        return [path for path in Path(str(model_spec)).iterdir() if path.is_file() and path.suffix != ".onnx"]
    return []


def _graph_inputs(path):
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers], len(model.graph.output)


def _torch_modules(value):
    """None (the environment's HIERTAG_TORCH_MODULES), False, True or the
    variable's text. The text is not checked here: the plugin reads it at the
    export as it reads HIERTAG_TORCH_MODULES (core/export_options.cpp), and its
    error or warning is reported (_plugin_line)."""
    if value is None or value is True or value is False or isinstance(value, str):
        return value
    return ",".join(value)


# The plugin's lines about HIERTAG_TORCH_MODULES (an invalid value, or names
# that are no torch.nn class) start so.
_TORCH_MODULES_LINE = "hiertag: HIERTAG_TORCH_MODULES"


def _plugin_line(text, flag_given):
    """The plugin's line about HIERTAG_TORCH_MODULES, naming --torch-modules
    when the flag set the variable."""
    text = text.strip().removeprefix("hiertag: ")
    return text.replace("HIERTAG_TORCH_MODULES", "--torch-modules", 1) if flag_given else text


def _tool(*arguments):
    try:
        return native.run_tool(arguments, capture_output=True, text=True)
    except FileNotFoundError as error:
        fail(str(error).removeprefix("hiertag: "))


def _export_once(model, args, path, opset, torch_modules, input_names, output_names):
    """Returns the plugin's lines about HIERTAG_TORCH_MODULES (torch's own output is silenced)."""
    import torch
    with quiet() as printed, hiertag.tagging(torch_modules=torch_modules):
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset,
                          input_names=input_names, output_names=output_names)
    return [line for text in printed for line in text.splitlines() if line.startswith(_TORCH_MODULES_LINE)]


def export_model(model_spec, output, *, config=None, task=None, inputs=(), opset=hiertag.OPSET,
                 torch_modules=None):
    """Builds the model (build), exports it with the plugin to `output` and
    returns the summary {"model", "output", "nodes", "modules", "inputs",
    "opset", "tree"} (tree: `hiertag tree --json --depth 2`). The file is
    written in a temporary directory beside `output` and renamed to it only
    once the export succeeded, the graph's inputs are the chosen ones and
    `hiertag validate` passed; on any error nothing is left and ExportError
    says why in one line."""
    output = Path(output)
    if output.is_dir():
        fail(f"output '{output}' is a directory")
    if not output.parent.is_dir():
        fail(f"output directory '{output.parent}' does not exist")
    verbs.refuse_overwriting([output], inputs=_input_files(model_spec))
    modules = _torch_modules(torch_modules)
    import torch
    from torch.onnx import _constants
    low, high = _constants.ONNX_BASE_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
    if not isinstance(opset, int) or not low <= opset <= high:
        fail(f"bad --opset {opset}: the TorchScript exporter takes {low} to {high}")
    try:
        with quiet() as printed:
            torch.ops.load_library(hiertag.library_path())
    except FileNotFoundError as error:
        fail(str(error).removeprefix("hiertag: "))
    except OSError as error:
        fail(f"cannot load the plugin: {_first_line(error)}")
    # The plugin's loader reports a failure to load its Python half on stderr.
    complaint = next((line for line in "".join(printed).splitlines() if line.startswith("hiertag:")), None)
    if complaint:
        fail(complaint.removeprefix("hiertag: "))

    model, args = build(model_spec, config=config, task=task, inputs=inputs)
    # The graph's inputs are named after the parameters when the arguments
    # are all tensors bound by name (always so for transformers models).
    values = [*args[:-1], *args[-1].values()] if args and isinstance(args[-1], dict) else list(args)
    input_names = getattr(model.forward, "hiertag_inputs", None)
    if not all(isinstance(v, torch.Tensor) for v in values):
        input_names = None
    # Filled by the narrowed forward while the exporter traces it, and read by
    # the exporter after the trace (it names the traced graph's outputs); a
    # list still empty then leaves torch's own names.
    output_names = getattr(model.forward, "hiertag_outputs", None)

    # Everything is written into a fresh directory beside OUT (torch writes a
    # model over 2 GiB as the .onnx plus one file per tensor), and moved to
    # OUT's directory only when the export succeeded, its graph's inputs are
    # the chosen ones and `hiertag validate` passed.
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
    staged = staging / output.name
    try:
        try:
            notes = _export_once(model, args, staged, opset, modules, input_names, output_names)
            graph_inputs, output_count = _graph_inputs(staged)
            if output_names and output_count != len(output_names):
                # The outputs did not flatten as their names: torch's names then.
                notes = _export_once(model, args, staged, opset, modules, input_names, None)
                graph_inputs, output_count = _graph_inputs(staged)
        except ExportError:
            raise
        except Exception as error:
            text = str(error)
            if _TORCH_MODULES_LINE in text:
                fail(_plugin_line(text[text.index(_TORCH_MODULES_LINE):].splitlines()[0], torch_modules is not None))
            if getattr(error, "hiertag_raised_by_model", False):
                shapes = ", ".join(f"{n}{list(v.shape)}" for n, v in zip(input_names or [], values))
                fail(f"{type(model).__name__} fails on the example inputs{f' ({shapes})' if shapes else ''}: "
                     f"{_first_line(error)}")
            if str(error).lstrip().startswith("hiertag"):
                fail(f"export failed: {_first_line(error)}")
            fail(f"torch cannot export this model: {_first_line(error)}")
        if input_names is not None and graph_inputs != input_names:
            fail(f"the exported graph's inputs are {graph_inputs}, not the chosen {input_names}")
        validated = _tool("validate", staged, "--json")
        try:
            validation = json.loads(validated.stdout)
        except json.JSONDecodeError:
            validation = {}
        if validated.returncode != 0 or not validation.get("valid"):
            problems = validation.get("problems") or [native.error_line(validated.stderr) or validated.stdout.strip()]
            fail(f"the tagged file is not valid: {str(problems[0]).replace(str(staged), str(output))}")
        for extra in staging.iterdir():  # external data first, the model last
            if extra != staged:
                os.replace(extra, output.parent / extra.name)
        os.replace(staged, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for note in notes:
        print(f"hiertag export: {_plugin_line(note, torch_modules is not None)}", file=sys.stderr)
    tree = _tool("tree", output, "--depth", "2", "--json")
    if tree.returncode != 0:
        fail(f"hiertag tree failed on {output}: {native.error_line(tree.stderr)}")
    return {"model": str(model_spec), "output": str(output), "nodes": validation["nodes"],
            "modules": validation["modules"], "inputs": graph_inputs, "opset": opset,
            "tree": json.loads(tree.stdout)}


# ---------------------------------------------------------------------------
# The command


def _parser():
    by_class = {}
    for task, auto in TASKS.items():
        by_class.setdefault(auto, []).append(task)
    tasks = "\n".join(f"  {' | '.join(names):<46}  transformers.{auto}" for auto, names in by_class.items())
    epilog = (__doc__.split("\n", 2)[2] + "\n\nTASK (default: a directory's or hub id's config.architectures[0], else AutoModel):\n"
              + tasks)
    parser = verbs.Parser(prog="hiertag export", description=__doc__.split("\n")[0],
                          epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL",
                        help="a transformers class (BertModel, transformers:GPT2LMHeadModel), a save_pretrained "
                             "directory, a cached hub id, or FILE.py:FUNCTION")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the tagged ONNX file to write")
    parser.add_argument("--config", metavar="JSON",
                        help="config arguments as a JSON object (a class: the whole config; a directory or hub "
                             "id: overrides)")
    parser.add_argument("--task", metavar="TASK",
                        help="the head, for a config class, directory or hub id (TASK names below)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SPEC",
                        help="an example input replacing or adding one: int64[1,32]:0..1000, float32[1,3,224,224], "
                             "ones[1,32] (repeatable)")
    parser.add_argument("--opset", type=int, default=hiertag.OPSET, metavar="N",
                        help=f"ONNX opset (default {hiertag.OPSET})")
    parser.add_argument("--torch-modules", default=None, metavar="0|1|A,B",
                        help="torch.nn modules in the tags: 0 none, 1 all, or a comma list of class names "
                             "(default: HIERTAG_TORCH_MODULES, else 0)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return parser


def run(options):
    summary = export_model(options.model, options.output, config=options.config, task=options.task,
                           inputs=options.input, opset=options.opset, torch_modules=options.torch_modules)
    if options.json:
        print(json.dumps(summary))
        return 0
    print(f"{summary['output']}: {summary['nodes']} nodes tagged, {summary['modules']} modules ({summary['model']})")
    tree = _tool("tree", summary["output"], "--depth", "2")
    sys.stdout.write(tree.stdout)
    return 0


def main(argv=None):
    # Nothing is ever downloaded: the hub is offline for this process.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return verbs.run_verb("hiertag export", _parser(), run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
