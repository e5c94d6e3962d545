from llmsim.cli import main

main()
