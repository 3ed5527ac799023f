"""The offline tools: digest-only recordings (``recording``: the recorder, an observer; ``reading``: what reads them
back), ``replay`` (a policy judged on recorded trajectories), ``tune`` (settings proposed from them), ``report``
(the HTML page) and ``cli`` (the ``repeat-hooks`` console script). Importing ``repeat_hooks`` loads none of them;
the recorder loads nothing of the replay."""
