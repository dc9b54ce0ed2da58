"""aiayn: "Attention Is All You Need" (Vaswani et al., 2017), implemented to be read.

Every formula the book teaches lives here once, tested against ``torch.nn``.
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .inspection import attention_maps
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
from .masks import causal_mask, padding_mask
from .model import Transformer, TransformerConfig, count_parameters
from .positional import PositionalEncoding, offset_matrix, sinusoidal_encoding
from .pretrained import BertConfig, BertEncoder, load_minilm, load_tokenizer, trace_sentences
from .utils import get_device, glue, set_seed

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention", "scaled_dot_product_attention",
    "FeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
    "causal_mask", "padding_mask",
    "Transformer", "TransformerConfig", "count_parameters",
    "PositionalEncoding", "sinusoidal_encoding", "offset_matrix",
    "get_device", "glue", "set_seed",
    "attention_maps",
    "BertConfig", "BertEncoder", "load_minilm", "load_tokenizer", "trace_sentences",
]
