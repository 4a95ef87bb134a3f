"""Building a model to export, with no file written: a transformers class
from a config (random weights, seeded; nothing is downloaded), a
save_pretrained directory, a hub id in the local cache, or FILE.py:FUNCTION;
its example inputs from the config and the forward's parameters; the forward
narrowed to them (bind_inputs). `hiertag export`, `verify`, `compare`,
`profile`, the bundled models (zoo) and the benchmarks build through it.

    from hiertag import models
    model, args = models.build("BertModel", config={"num_hidden_layers": 2})

Bad input raises ModelError with one line saying why. Imports torch and
transformers when a model is built, not at import."""

import contextlib
import importlib.util
import inspect
import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

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


class ModelError(ValueError):
    """A model or input that cannot be built: one line saying why."""


def fail(message):
    raise ModelError(message)


def describe_error(error):
    """An error as one line: its type's name and its message's first line."""
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
    try:
        with quiet():
            import transformers
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] != "transformers":
            raise  # transformers is there; something it needs is not, and the error names it
        fail("transformers is not installed, and this model needs it: pip install transformers "
             "(a FILE.py:FUNCTION model does not)")
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
        fail(f"cannot build {label} from its config: {describe_error(error)}")


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
        fail(f"bad --config for {config_class.__name__}: {describe_error(error)}")
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
            fail(f"cannot read the config of {source}: {describe_error(error)}")
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
            fail(f"cannot load the weights of {source}: {describe_error(error)}")
        fail(f"the weights of '{source}' are not in the local HuggingFace cache (nothing is downloaded): "
             f"{describe_error(error)}")


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
        fail(f"cannot load {path}: {describe_error(error)}")
    if not callable(getattr(module, function, None)):
        fail(f"{path} has no function '{function}'")
    try:
        with quiet():
            result = getattr(module, function)()
    except Exception as error:
        fail(f"{path}:{function}() failed: {describe_error(error)}")
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


def is_file_spec(spec):
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
        fail(f"bad --input '{spec}': {describe_error(error)}")
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
    for stride, kernel in zip(reversed(strides), reversed(kernels), strict=True):
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
        kwargs.update(zip(names, args, strict=False))  # the first names given by position, the rest by keyword
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
    if is_file_spec(model_spec):
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
