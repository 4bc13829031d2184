from trtllm_script_builder.cli import main

main()
