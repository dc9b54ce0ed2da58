"""The chapters' experiments, one module per topic: recurrent baselines
(chapter 1), variance scaling (3), multi-head experiments (4), extrapolation (5), normalization
(6), Table 1's costs and their measurement (8), and the heads of a trained model
(trained_heads, with pronouns' minimal pairs).
"""
