from dlbench.cli.entry import main

main()
