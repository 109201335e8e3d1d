"""What operators read: the trace of a run (admin timeline, ``jobs show``), figures
(``jobs stats``, the dashboard, metrics) and the terminal's tables. Reads only."""
