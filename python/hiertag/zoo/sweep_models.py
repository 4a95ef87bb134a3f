"""The broad sweep's models (bench/sweep.py): transformers architectures beyond
the bundled nine, each from a tiny config with seeded random weights (nothing
is downloaded). Each entry is (family, builder); a builder returns (model, args)
as torch.onnx.export takes them."""

import torch
import transformers

from hiertag.models import prepare_for_torchscript_export


def _ids(vocab=100, length=8):
    generator = torch.Generator().manual_seed(1)
    return torch.randint(3, vocab, (1, length), generator=generator)


def _image(size=32, channels=3):
    return torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(2))


def _audio(samples=800):
    return torch.randn(1, samples, generator=torch.Generator().manual_seed(3))


def _model(model_class, config_class, **config):
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**config)
    return prepare_for_torchscript_export(getattr(transformers, model_class)(config).eval())


def text(model_class, config_class, vocab=100, **config):
    """A text model on token ids with an all-ones attention mask (without one,
    transformers' decoders probe for packed sequences with aten::diff, which
    the TorchScript exporter cannot convert)."""
    def build():
        model = _model(model_class, config_class, vocab_size=vocab, **config)
        ids = _ids(vocab)
        return model, (ids, {"attention_mask": torch.ones_like(ids)})
    return build


def seq2seq(model_class, config_class, vocab=100, **config):
    def build():
        model = _model(model_class, config_class, vocab_size=vocab, **config)
        ids = _ids(vocab)
        return model, (ids, {"attention_mask": torch.ones_like(ids), "decoder_input_ids": _ids(vocab, 4)})
    return build


def vision(model_class, config_class, size=32, **config):
    def build():
        return _model(model_class, config_class, **config), (_image(size),)
    return build


def audio(model_class, config_class, samples=800, **config):
    def build():
        return _model(model_class, config_class, **config), (_audio(samples),)
    return build


def _whisper():
    model = _model("WhisperModel", "WhisperConfig", vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1,
                   encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                   num_mel_bins=8, max_source_positions=16, max_target_positions=16, pad_token_id=1,
                   bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, use_cache=False)
    features = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(3))
    decoder_ids = _ids(100, 4)
    return model, (features, {"decoder_input_ids": decoder_ids, "decoder_attention_mask": torch.ones_like(decoder_ids)})


def _speech2text():
    model = _model("Speech2TextModel", "Speech2TextConfig", vocab_size=100, d_model=32, encoder_layers=1,
                   decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                   decoder_ffn_dim=64, input_feat_per_channel=8, num_conv_layers=1, conv_kernel_sizes=(5,),
                   conv_channels=16, max_source_positions=32, max_target_positions=16, use_cache=False)
    features = torch.randn(1, 16, 8, generator=torch.Generator().manual_seed(3))
    return model, (features, {"decoder_input_ids": _ids(100, 4)})


def _ast():
    model = _model("ASTModel", "ASTConfig", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, num_mel_bins=16, max_length=32, patch_size=8,
                   frequency_stride=8, time_stride=8)
    return model, (torch.randn(1, 32, 16, generator=torch.Generator().manual_seed(3)),)


def _vilt():
    model = _model("ViltModel", "ViltConfig", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8,
                   max_position_embeddings=16, num_images=1)
    ids = _ids()
    return model, (ids, {"attention_mask": torch.ones_like(ids), "pixel_values": _image(),
                         "pixel_mask": torch.ones(1, 32, 32, dtype=torch.long)})


def _owlvit():
    model = _model("OwlViTModel", "OwlViTConfig",
                   text_config=dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                    num_attention_heads=2, max_position_embeddings=16),
                   vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, image_size=32, patch_size=8),
                   projection_dim=16)
    ids = _ids(100, 8)
    return model, (ids, {"pixel_values": _image(), "attention_mask": torch.ones_like(ids)})


def _siglip():
    model = _model("SiglipModel", "SiglipConfig",
                   text_config=dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                    num_attention_heads=2, max_position_embeddings=16),
                   vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, image_size=32, patch_size=8))
    ids = _ids(100, 16)
    return model, (ids, {"pixel_values": _image()})


def _blip_vision():
    model = _model("BlipVisionModel", "BlipVisionConfig", hidden_size=32, intermediate_size=64,
                   num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
    return model, (_image(),)


def _layoutlm():
    model = _model("LayoutLMModel", "LayoutLMConfig", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                   max_2d_position_embeddings=64)
    ids = _ids()
    boxes = torch.tensor([[[1, 2, 10, 12]] * ids.shape[1]])
    return model, (ids, {"bbox": boxes, "attention_mask": torch.ones_like(ids)})


_BERTLIKE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=32)
_DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=32, use_cache=False)
_SEQ2SEQ = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
                use_cache=False)

TEXT_ENCODER, DECODER, ENCODER_DECODER = "text encoder", "decoder LM", "encoder-decoder"
VISION_CNN, VISION_TRANSFORMER, AUDIO, MULTIMODAL = "vision CNN", "vision transformer", "audio", "multimodal"

MODELS = {
    # text encoders
    "roberta": (TEXT_ENCODER, text("RobertaModel", "RobertaConfig", pad_token_id=1, **_BERTLIKE)),
    "distilbert": (TEXT_ENCODER, text("DistilBertModel", "DistilBertConfig", dim=32, n_layers=2, n_heads=2,
                                      hidden_dim=64, max_position_embeddings=32)),
    "albert": (TEXT_ENCODER, text("AlbertModel", "AlbertConfig", embedding_size=16, **_BERTLIKE)),
    "electra": (TEXT_ENCODER, text("ElectraModel", "ElectraConfig", embedding_size=16, **_BERTLIKE)),
    "deberta": (TEXT_ENCODER, text("DebertaModel", "DebertaConfig", relative_attention=True,
                                   pos_att_type=["p2c", "c2p"], **_BERTLIKE)),
    "deberta_v2": (TEXT_ENCODER, text("DebertaV2Model", "DebertaV2Config", relative_attention=True,
                                      position_buckets=8, pos_att_type=["p2c", "c2p"], **_BERTLIKE)),
    "xlm_roberta": (TEXT_ENCODER, text("XLMRobertaModel", "XLMRobertaConfig", pad_token_id=1, **_BERTLIKE)),
    "mpnet": (TEXT_ENCODER, text("MPNetModel", "MPNetConfig", pad_token_id=1, **_BERTLIKE)),
    "convbert": (TEXT_ENCODER, text("ConvBertModel", "ConvBertConfig", embedding_size=32, **_BERTLIKE)),
    "squeezebert": (TEXT_ENCODER, text("SqueezeBertModel", "SqueezeBertConfig", embedding_size=32, q_groups=1,
                                       k_groups=1, v_groups=1, post_attention_groups=1, intermediate_groups=1,
                                       output_groups=1, **_BERTLIKE)),
    "funnel": (TEXT_ENCODER, text("FunnelModel", "FunnelConfig", d_model=32, n_head=2, d_head=16, d_inner=64,
                                  block_sizes=[1, 1], num_decoder_layers=1)),
    "canine": (TEXT_ENCODER, text("CanineModel", "CanineConfig", vocab=1000, **{**_BERTLIKE,
                                  "max_position_embeddings": 64, "num_hash_buckets": 64, "downsampling_rate": 2})),
    "layoutlm": (TEXT_ENCODER, _layoutlm),
    # decoder language models
    "gpt_neo": (DECODER, text("GPTNeoForCausalLM", "GPTNeoConfig", hidden_size=32, num_layers=2, num_heads=2,
                              attention_types=[[["global", "local"], 1]], max_position_embeddings=32,
                              window_size=4, use_cache=False)),
    "gptj": (DECODER, text("GPTJForCausalLM", "GPTJConfig", n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                           n_positions=32, use_cache=False)),
    "opt": (DECODER, text("OPTForCausalLM", "OPTConfig", hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                          num_attention_heads=2, max_position_embeddings=32, word_embed_proj_dim=32,
                          use_cache=False)),
    "bloom": (DECODER, text("BloomForCausalLM", "BloomConfig", hidden_size=32, n_layer=2, n_head=4, use_cache=False)),
    "falcon": (DECODER, text("FalconForCausalLM", "FalconConfig", hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, use_cache=False)),
    "mistral": (DECODER, text("MistralForCausalLM", "MistralConfig", num_key_value_heads=2, sliding_window=4,
                              **_DECODER)),
    "qwen2": (DECODER, text("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2, **_DECODER)),
    "phi": (DECODER, text("PhiForCausalLM", "PhiConfig", **_DECODER)),
    "gemma": (DECODER, text("GemmaForCausalLM", "GemmaConfig", num_key_value_heads=2, head_dim=8, **_DECODER)),
    "stablelm": (DECODER, text("StableLmForCausalLM", "StableLmConfig", num_key_value_heads=2, **_DECODER)),
    "gpt_bigcode": (DECODER, text("GPTBigCodeForCausalLM", "GPTBigCodeConfig", n_embd=32, n_layer=2, n_head=4,
                                  n_positions=32, use_cache=False)),
    "codegen": (DECODER, text("CodeGenForCausalLM", "CodeGenConfig", n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                              n_positions=32, use_cache=False)),
    "mixtral": (DECODER, text("MixtralForCausalLM", "MixtralConfig", num_key_value_heads=2, num_local_experts=4,
                              num_experts_per_tok=2, **_DECODER)),
    "qwen2_moe": (DECODER, text("Qwen2MoeForCausalLM", "Qwen2MoeConfig", num_key_value_heads=2, num_experts=4,
                                num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                                **_DECODER)),
    # encoder-decoders
    "bart": (ENCODER_DECODER, seq2seq("BartModel", "BartConfig", **_SEQ2SEQ)),
    "mbart": (ENCODER_DECODER, seq2seq("MBartModel", "MBartConfig", **_SEQ2SEQ)),
    "pegasus": (ENCODER_DECODER, seq2seq("PegasusModel", "PegasusConfig", **_SEQ2SEQ)),
    "marian": (ENCODER_DECODER, seq2seq("MarianModel", "MarianConfig", decoder_vocab_size=100, pad_token_id=1,
                                        **_SEQ2SEQ)),
    "m2m100": (ENCODER_DECODER, seq2seq("M2M100Model", "M2M100Config", **_SEQ2SEQ)),
    "mt5": (ENCODER_DECODER, seq2seq("MT5Model", "MT5Config", d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                     num_heads=4, use_cache=False)),
    "blenderbot_small": (ENCODER_DECODER, seq2seq("BlenderbotSmallModel", "BlenderbotSmallConfig", **_SEQ2SEQ)),
    # vision CNNs
    "convnext": (VISION_CNN, vision("ConvNextModel", "ConvNextConfig", hidden_sizes=[8, 16], depths=[1, 1],
                                    num_stages=2)),
    "convnextv2": (VISION_CNN, vision("ConvNextV2Model", "ConvNextV2Config", hidden_sizes=[8, 16], depths=[1, 1],
                                      num_stages=2)),
    "regnet": (VISION_CNN, vision("RegNetModel", "RegNetConfig", embedding_size=8, hidden_sizes=[8, 16],
                                  depths=[1, 1], groups_width=8)),
    "mobilenet_v2": (VISION_CNN, vision("MobileNetV2Model", "MobileNetV2Config", depth_multiplier=0.25,
                                        image_size=32)),
    "bit": (VISION_CNN, vision("BitModel", "BitConfig", embedding_size=32, hidden_sizes=[32, 64], depths=[1, 1],
                               layer_type="bottleneck", num_groups=8)),
    "poolformer": (VISION_CNN, vision("PoolFormerModel", "PoolFormerConfig", hidden_sizes=[8, 16], depths=[1, 1],
                                      num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1],
                                      pool_size=3)),
    "resnet_basic": (VISION_CNN, vision("ResNetModel", "ResNetConfig", embedding_size=8, hidden_sizes=[8, 16],
                                        depths=[1, 1], layer_type="basic")),
    # vision transformers, hierarchical and windowed ones included
    "swin": (VISION_TRANSFORMER, vision("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16,
                                        depths=[1, 1], num_heads=[2, 2], window_size=4)),
    "swinv2": (VISION_TRANSFORMER, vision("Swinv2Model", "Swinv2Config", image_size=32, patch_size=4, embed_dim=16,
                                          depths=[1, 1], num_heads=[2, 2], window_size=4)),
    "deit": (VISION_TRANSFORMER, vision("DeiTModel", "DeiTConfig", hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8)),
    "beit": (VISION_TRANSFORMER, vision("BeitModel", "BeitConfig", hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8,
                                        use_relative_position_bias=True)),
    "dinov2": (VISION_TRANSFORMER, vision("Dinov2Model", "Dinov2Config", hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, mlp_ratio=2, image_size=32, patch_size=8)),
    "segformer": (VISION_TRANSFORMER, vision("SegformerModel", "SegformerConfig", num_encoder_blocks=2,
                                             depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                             num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
                                             mlp_ratios=[2, 2])),
    "mobilevit": (VISION_TRANSFORMER, vision("MobileViTModel", "MobileViTConfig", image_size=32,
                                             hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 48],
                                             num_attention_heads=2)),
    "pvt": (VISION_TRANSFORMER, vision("PvtModel", "PvtConfig", image_size=32, num_encoder_blocks=2, depths=[1, 1],
                                       sequence_reduction_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[4, 2],
                                       strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2])),
    "levit": (VISION_TRANSFORMER, vision("LevitModel", "LevitConfig", size=64, image_size=64,
                                         hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                                         key_dim=[8, 8, 8])),
    # audio
    "hubert": (AUDIO, audio("HubertModel", "HubertConfig", hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                            conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)),
    "wavlm": (AUDIO, audio("WavLMModel", "WavLMConfig", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                           num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, num_buckets=16)),
    "data2vec_audio": (AUDIO, audio("Data2VecAudioModel", "Data2VecAudioConfig", hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                    conv_pos_kernel_size=4, num_conv_pos_embedding_layers=1)),
    "whisper": (AUDIO, _whisper),
    "speech2text": (AUDIO, _speech2text),
    "ast": (AUDIO, _ast),
    # multimodal
    "vilt": (MULTIMODAL, _vilt),
    "owlvit": (MULTIMODAL, _owlvit),
    "siglip": (MULTIMODAL, _siglip),
    "blip_vision": (MULTIMODAL, _blip_vision),
}
