// scaletrain trainer entry point (being built up; see app/trainer.cpp).
int main() { return 0; }
