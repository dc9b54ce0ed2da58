"""The chapters' experiments, one module per topic: recurrent baselines
(chapter 1), variance scaling (3), multi-head experiments (4), extrapolation (5), normalization
(6), and Table 1's costs and their measurement (8).
"""
