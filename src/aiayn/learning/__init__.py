"""Learning with the model: the generated tasks and their tokenizers, the
training loop and the paper's recipe, and decoding (greedy, beam search, cached).
"""
