from llmsim.cli.simulate import main

main()
