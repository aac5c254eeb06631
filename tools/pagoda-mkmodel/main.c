/* tools/pagoda-mkmodel/main.c — pagoda-mkmodel: see mkmodel.c. */
#include "tools/pagoda-mkmodel/mkmodel.h"

int main(int argc, char **argv)
{
	return mkmodel_main(argc, argv);
}
