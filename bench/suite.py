"""The benchmark's models: real HuggingFace architectures at their published
sizes, built from configs (random weights, nothing downloaded). Every factory
seeds torch, so every process builds identical weights and the methods' files
can be compared node for node.

Each factory returns (model in eval mode, export arguments as the user passes
them to torch.onnx.export)."""

import torch

from hiertag.models import prepare_for_torchscript_export

TEXT_LENGTH = 64


def _ids(vocab, length=TEXT_LENGTH):
    return torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(1))


def _bert(layers):
    from transformers import BertConfig, BertModel
    ids = _ids(30522)
    model = prepare_for_torchscript_export(BertModel(BertConfig(num_hidden_layers=layers)))
    return model, (ids, {"attention_mask": torch.ones_like(ids)})


def bert_2():
    return _bert(2)


def bert_12():
    return _bert(12)


def gpt2_12():
    from transformers import GPT2Config, GPT2LMHeadModel
    ids = _ids(50257)
    # An explicit mask keeps transformers from probing for packed sequences with
    # aten::diff, which the TorchScript exporter cannot convert.
    return GPT2LMHeadModel(GPT2Config(use_cache=False)), (ids, {"attention_mask": torch.ones_like(ids)})


def t5_small():
    from transformers import T5Config, T5Model
    ids = _ids(32128)
    return T5Model(T5Config(use_cache=False)), (ids, {"attention_mask": torch.ones_like(ids),
                                                       "decoder_input_ids": _ids(32128, 16)})


def llama_style():
    from transformers import LlamaConfig, LlamaForCausalLM
    # A 12-layer LLaMA decoder with grouped-query attention (12 query heads,
    # 4 key/value heads), RMSNorm, SwiGLU and rotary embeddings.
    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=512,
                         use_cache=False)
    ids = _ids(32000)
    return LlamaForCausalLM(config), (ids, {"attention_mask": torch.ones_like(ids)})


def resnet_50():
    from transformers import ResNetConfig, ResNetModel
    return ResNetModel(ResNetConfig()), (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


def vit_base():
    from transformers import ViTConfig, ViTModel
    return ViTModel(ViTConfig()), (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


_FACTORIES = (bert_2, bert_12, gpt2_12, t5_small, llama_style, resnet_50, vit_base)
MODELS = {f.__name__.replace("_", "-"): f for f in _FACTORIES}


def known(name):
    kind, _, zoo_name = name.partition(":")
    if kind == "zoo":
        from hiertag import zoo
        return zoo_name in zoo.ALL
    return name in MODELS


def build(name):
    """(model, args) of a suite model (`bert-12`) or of a test model (`zoo:bert`)."""
    kind, _, zoo_name = name.partition(":")
    if kind == "zoo":
        from hiertag import zoo
        if zoo_name not in zoo.ALL:
            raise KeyError(f"unknown zoo model '{zoo_name}' (known: {', '.join(zoo.ALL)})")
        return zoo.ALL[zoo_name]()
    if name not in MODELS:
        raise KeyError(f"unknown model '{name}' (known: {', '.join(MODELS)}, or zoo:NAME)")
    torch.manual_seed(0)
    model, args = MODELS[name]()
    return model.eval(), args
