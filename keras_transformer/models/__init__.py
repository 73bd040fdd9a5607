"""Whole models built from the layers: the Transformer (`transformer.py`) with its builders from
named hyper-parameters and Table 3's rows, and CoVe's family (McCann et al. 2017): the recurrent
cells, the MT-LSTM, the CoVe layer and the biattentive classifier."""
