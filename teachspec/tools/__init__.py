"""Tools that stand above the package and use all of it: they make and measure the bundled pair, and nothing in
the package imports them.

    python -m teachspec.tools.train --stage all      # train the bundled pair's tokenizer, target, draft, EAGLE head
    python -m teachspec.tools.card                   # re-measure the pair and rewrite its MODEL_CARD.md
"""
