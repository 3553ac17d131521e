"""The web app: the Gradio page, one module per tab, request parsing shared by all of them.

`run_request` (the page's and the API's values → a checked `RunRequest`, the method controls), `guard` (one-line
refusals), `background` (work in a thread, progress streamed), `preload` (the start-up load), `trace_files` (the
Download button's files); the main view `generate_tab` and the tabs `replay_tab`, `theory_tab`, `compare_tab`,
`code_tab`, `methods_tab`, `tune_tab`, with `after_run` (the views a finished run fills), `preset_picker`,
`links` and `mcp_tools`; `page` puts them together and `launch` serves it. Nothing here imports `page` but `launch`.
"""
