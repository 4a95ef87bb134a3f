"""Models the tests export: HuggingFace transformers models built from small
configs (random weights, nothing downloaded) and the corner-case models of
corner_cases.py. Every factory seeds torch, so two processes build identical
weights and their exports can be compared byte for byte."""

import torch

from hiertag.models import prepare_for_torchscript_export
from hiertag.zoo import corner_cases


def _seeded(build):
    def factory():
        torch.manual_seed(0)
        model, args = build()
        return model.eval(), args
    factory.__name__ = build.__name__
    return factory


def _narrowed(model, ids):
    """A causal LM on input_ids and an all-ones attention_mask, its forward
    narrowed to those two (hiertag.models.bind_inputs): otherwise the
    exporter passes logits_to_keep=0 as a traced tensor, and the logits of the
    last position alone come out."""
    from hiertag.models import bind_inputs
    return bind_inputs(model, ["input_ids", "attention_mask"]), (ids, {"attention_mask": torch.ones_like(ids)})


def _ids(vocab, length=16, batch=1):
    generator = torch.Generator().manual_seed(1)
    return torch.randint(3, vocab, (batch, length), generator=generator)


@_seeded
def bert():
    from transformers import BertConfig, BertModel
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=64)
    ids = _ids(1000)
    return prepare_for_torchscript_export(BertModel(config)), (ids, {"attention_mask": torch.ones_like(ids)})


@_seeded
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=64,
                        use_cache=False)
    ids = _ids(1000)
    # An explicit mask keeps transformers from probing for packed sequences with
    # aten::diff, which the exporter cannot convert (also without hiertag).
    return _narrowed(GPT2LMHeadModel(config), ids)


@_seeded
def t5():
    from transformers import T5Config, T5Model
    config = T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                      use_cache=False)
    return T5Model(config), (_ids(100, 12), {"attention_mask": torch.ones(1, 12, dtype=torch.long),
                                              "decoder_input_ids": _ids(100, 8)})


@_seeded
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         use_cache=False)
    ids = _ids(100)
    return _narrowed(LlamaForCausalLM(config), ids)


@_seeded
def vit():
    from transformers import ViTConfig, ViTModel
    config = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                       image_size=32, patch_size=8)
    return ViTModel(config), (torch.randn(1, 3, 32, 32),)


@_seeded
def resnet():
    from transformers import ResNetConfig, ResNetModel
    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48], depths=[2, 1, 1],
                          layer_type="bottleneck")
    return ResNetModel(config), (torch.randn(1, 3, 64, 64),)


@_seeded
def clip():
    from transformers import CLIPConfig, CLIPModel
    config = CLIPConfig(
        text_config=dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=16),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8),
        projection_dim=16)
    ids = _ids(100, 8)
    return CLIPModel(config), (ids, {"pixel_values": torch.randn(1, 3, 32, 32), "attention_mask": torch.ones_like(ids)})


@_seeded
def sam():
    from transformers import SamConfig, SamModel
    config = SamConfig(
        vision_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=2,
                           image_size=64, patch_size=16, mlp_dim=64, window_size=2,
                           global_attn_indexes=[1], num_pos_feats=8),
        prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=16, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 mlp_dim=32, iou_head_hidden_dim=16),
    )
    points = torch.tensor([[[[20.0, 30.0]]]])
    return SamModel(config), (torch.randn(1, 3, 64, 64), {"input_points": points})


@_seeded
def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)
    return Wav2Vec2Model(config), (torch.randn(1, 800),)


HUGGINGFACE = {f.__name__: f for f in (bert, gpt2, t5, llama, vit, resnet, clip, sam, wav2vec2)}
CORNER_CASES = {name: _seeded(build) for name, build in corner_cases.MODELS.items()}
ALL = {**HUGGINGFACE, **CORNER_CASES}
