"""The web app: the Gradio page, one module per tab, request parsing shared by all of them.

Its modules, each importing only those listed before it (`tests/test_architecture.py` checks it). Nothing here imports
`page` but `launch`.
  guard           every handler's bad value or failure answered in one line (`guarded`), the session key
  language        the page's language: Gradio's I18n for labels, the visitor's language for what the server writes
  outputs         a handler's outputs and inputs declared once by name (`Outputs`, `Inputs`)
  background      work in a thread, its progress streamed to the page
  panels          the results panel a long job fills (Compare, Tune)
  run_request     the page's and the API's values to a checked `RunRequest`, the method controls
  access          the theme at WCAG 2.1 AA contrast, a visible focus ring, right to left for the sliders
  gate            the ASGI layer in front of Gradio: one-line 4xx refusals, queued calls nobody reads ended
  head_start      what `python app.py` does before importing Gradio: the default model's conversion started
  preload         the start-up load: the default model loaded and warmed up while the page is served
  trace_files     the Download button's files
  uploads         uploaded traces, held within one budget for all sessions together
  handout_button  the run's printable handout, offered after each run
  preset_picker   the presets: a scenario's settings applied to the controls
  links           shareable links: the settings as URL query parameters, and a page restored from one
  follow          follow the presenter: the class link and QR code, a follower's live view, "kept or refused?"
  presenter       for a class: the presenter's view, the pace of a run, "Final text only"
  sessions        what a visitor's session keeps, bounded and freed when the visitor leaves
  gallery_picker  the gallery of recorded runs, opened in the replay at once
  methods_tab     the Methods tab: the registry's table, the lecture texts
  theory_tab      the Theory tab: the speed-up curves and a run's diagnosis
  code_tab        the Code tab: the script and command that reproduce a run
  replay_tab      "Step through a run": a trace replayed, the step microscope
  after_run       the views a finished run fills (replay, theory, code)
  compare_tab     the Compare tab: methods measured side by side
  tune_tab        the Tune tab: a method's settings measured on the visitor's prompts
  generate_tab    the main view: a run streamed token by token, stop, pace
  mcp_tools       the API's and MCP's tools (generate, compare, bench), stopped when their agent leaves
  page            puts the tabs together (`build_ui`)
  launch          serves the page (the gate in front, the MCP server, the start-up work)
"""
