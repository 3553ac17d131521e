"""Entry point: `python app.py` serves the playground (also the Hugging Face Space entry).

Listens on 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise, and
starts loading the default model in the background right away (PLAYGROUND_PRELOAD). On a cold
cache its conversion starts first, in a second process, before Gradio is imported.
"""

if __name__ == "__main__":
    from playground.app.head_start import convert_default_ahead
    from playground.models import gc_paused

    with gc_paused():  # Gradio's import allocates in bulk (`gc_paused` says why)
        convert_default_ahead()  # before Gradio's import: seconds that the conversion runs beside it
        from playground.app.launch import main
    main()
