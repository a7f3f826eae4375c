"""What the tests share, apart from fixtures (those are in the conftest.py files): imported as `helpers.<module>`
(pyproject.toml's `pythonpath` puts tests/ on the path). No test module imports another; what two of them need is here.

- models: small config-built transformers models, the instruct-style tokenizer, the draft-cache check;
- pairs: the engine tests' config-built pair (`make_pair`), PROMPT and COPY_PROMPT;
- families: the real model families, each a config-built pair with stop rules its greedy continuation reaches;
- views: the views' tests' noisy pair (`noisy_pair`) and an engine that has recorded a few prompts (`record`);
- exact: toy trigram models and the exact law of chain speculation, by enumeration (`make_table`, `max_error`);
- tree_law: the exact law of one tree step, by enumeration, and the multi-draft mutants planted in tree.py;
- statistics: the chi-square harness of the acceptance rule on a small Markov "language";
- laws: a real model's exact law of its next tokens, and a chi-square test of counts against it;
- devices: a watch on the tensor factories teachspec calls without a device;
- events: a log holding every kind of event;
- claims: the claims a lecture's run recorded, and those that did not hold;
- course_submissions: the submissions the grading tests grade (solutions, blanks, bugs, gaming);
- lab: the browser suite's JupyterLab, Chromium and page measures.
"""
