"""Entry point: `python app.py` serves the playground (also the Hugging Face Space entry).

Listens on 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise, and
starts loading the default model in the background right away (PLAYGROUND_PRELOAD).
"""

from playground.app.launch import main

if __name__ == "__main__":
    main()
