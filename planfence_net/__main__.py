from planfence_net.cli import main

main()
