"""Scale-out: ``python -m aiayn.train`` (also under ``torchrun``) and what only it
needs: the distributed set-up, batches by token count, a subword vocabulary, and
``python -m aiayn.train.translate`` to use a trained model. See :mod:`aiayn.train.cli`.
"""
