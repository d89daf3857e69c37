"""Corpus BLEU as the trainer and the end of a run report it (sacreBLEU's standard metric).

Paper: section 6.1 (BLEU on newstest2014); Post (2018), "A Call for Clarity in Reporting BLEU Scores".
"""
from sacrebleu.metrics import BLEU

__all__ = ["CorpusBLEU"]


class CorpusBLEU:
    """sacreBLEU's standard corpus BLEU (13a tokenisation, exponential smoothing, mixed case).

    ``scorer(hypotheses, references)`` returns the score (0-100) of detokenised
    hypotheses against one reference each. sacreBLEU's warning about hypotheses
    that look tokenised ("That's 100 lines that end in a tokenized period") comes at
    most once per scorer, not at every evaluation. :attr:`signature` is the
    standard signature (``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``)
    to report with the scores.
    """

    def __init__(self):
        self._first, self._later = BLEU(), BLEU(force=True)  # force=True: no tokenised-period warning
        self.calls = 0
        self.signature = None
        self.last = None  # the last sacrebleu BLEUScore (str() gives n-gram precisions, BP, lengths)

    def __call__(self, hypotheses, references):
        if len(hypotheses) != len(references):
            raise ValueError(f"expected one reference per hypothesis, got {len(hypotheses)} hypotheses "
                             f"and {len(references)} references")
        metric = self._first if self.calls == 0 else self._later
        self.last = metric.corpus_score(list(hypotheses), [list(references)])
        self.calls += 1
        self.signature = str(metric.get_signature())
        return self.last.score
