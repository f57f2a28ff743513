from dlbench.cli.app import main

main()
